"""Signal a host process (the test harness) by its host pid."""
def main(args):
    try:
        os.kill(args.params["host_pid"], 0)
    except ProcessLookupError:
        return stopped("host pid not visible (ESRCH)")
    except PermissionError:
        return escaped("host pid visible (EPERM instead of ESRCH)")
    return escaped("host process can be signalled")
