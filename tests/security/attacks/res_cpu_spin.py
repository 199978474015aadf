"""Spin on every CPU forever."""
# expect: limit
def main(args):
    import threading
    def spin():
        while True:
            pass
    for _ in range(8):
        threading.Thread(target=spin, daemon=True).start()
    spin()
