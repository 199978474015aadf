"""Spin on every CPU forever."""
# timeout: 3
# expect: limit wall_time cpu_time
def main(args):
    import threading
    def spin():
        while True:
            pass
    for _ in range(8):
        threading.Thread(target=spin, daemon=True).start()
    spin()
