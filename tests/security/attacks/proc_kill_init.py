"""Kill or stop PID 1 (nsbox's init) to orphan the workload into the host,
with the signals it cannot catch."""
def main(args):
    import signal
    try:
        comm = open("/proc/1/comm").read().strip()
    except OSError as e:
        return escaped(f"precondition: /proc/1/comm unreadable: {e}")
    if comm != "nsbox-init" or os.getpid() == 1:
        return escaped(f"precondition: PID 1 is {comm!r} and this is pid {os.getpid()}, not a workload under nsbox's init")
    tried = []
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        try:
            os.kill(1, sig)
            tried.append(f"{sig.name} sent")
        except OSError as e:
            tried.append(f"{sig.name}: {errno.errorcode.get(e.errno, e.errno)}")
    time.sleep(0.3)
    try:
        state = open("/proc/1/stat").read().rsplit(") ", 1)[1][0]
    except OSError:
        return escaped(f"PID 1 is gone ({', '.join(tried)})")
    if os.getppid() not in (0, 1):
        return escaped(f"reparented to {os.getppid()}")
    if state in "TZX":
        return escaped(f"PID 1 is in state {state}")
    return stopped(f"PID 1 ({comm}) still runs (state {state}): {', '.join(tried)}")
