"""Outlive the run with setsid and a double fork."""
# expect: no_process


def sleepers_with(marker):
    """How many processes of this run have the marker in their argv[0]."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        count += marker.encode() in argv0
    return count


def main(args):
    marker = args.params["marker"]
    # The marker goes in argv[0], where the harness looks for survivors:
    # sleep takes every other argument as a time and would exit at once.
    import shutil

    sleep = shutil.which("sleep")
    link = f"/tmp/{marker}-sleeper"
    os.symlink(sleep, link)
    os.system(f"setsid sh -c '{link} 1000 & {link} 1000' >/dev/null 2>&1 &")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sleep, [f"{marker}-sleeper", "1001"])
        os._exit(0)
    # All three daemons must be running before the run ends, or the check
    # that none survives would prove nothing; a slow machine gets 10 s.
    deadline = time.monotonic() + 10
    while sleepers_with(marker) < 3:
        if time.monotonic() > deadline:
            return escaped(f"only {sleepers_with(marker)} of 3 daemons started: the check would prove nothing")
        time.sleep(0.05)
    return stopped("3 daemons started; the harness checks none survives the run")
