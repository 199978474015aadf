"""Fork until the host runs out of processes."""
# expect: limit pids
def main(args):
    children = []
    try:
        for _ in range(5000):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
    except OSError as e:
        return stopped(f"fork refused after {len(children)}: {e.strerror}")
    return escaped(f"{len(children)} processes forked")
