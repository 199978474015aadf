"""Start threads without bound."""
# expect: limit pids
def main(args):
    import threading
    ev = threading.Event()
    started = 0
    try:
        for _ in range(5000):
            t = threading.Thread(target=ev.wait, daemon=True)
            t.start()
            started += 1
    except RuntimeError as e:
        ev.set()
        return stopped(f"thread creation refused after {started}: {e}")
    ev.set()
    return escaped(f"{started} threads")
