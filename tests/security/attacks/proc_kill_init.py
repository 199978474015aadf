"""Kill PID 1 (nsbox's init) to orphan the workload into the host."""
def main(args):
    import signal
    try:
        os.kill(1, signal.SIGKILL)
    except PermissionError:
        return stopped("SIGKILL to init refused (EPERM)")
    time.sleep(0.2)
    if os.getppid() == 0:
        return escaped("init killed, reparented outside")
    return stopped("init ignores signals from inside")
