"""Reboot, swap, set or tune the clock, turn on process accounting, rename
the host, touch quotas, hang up the terminal, load an old-style library."""
# denied: reboot swapon swapoff settimeofday clock_settime adjtimex clock_adjtime acct
# denied: sethostname setdomainname quotactl quotactl_fd lookup_dcookie uselib vhangup
def main(args):
    ts = struct.pack("qq", 0, 0)
    timex = bytes(208)  # struct timex with modes 0: only a query, which anyone may make without the filter
    calls = (("reboot", (0xfee1dead, 672274793, 0x1234567, None)), ("swapon", (b"/tmp/x", 0)),
             ("swapoff", (b"/tmp/x",)), ("settimeofday", (ts, None)), ("clock_settime", (0, ts)),
             ("adjtimex", (timex,)), ("clock_adjtime", (0, timex)), ("acct", (b"/tmp/acct",)),
             ("sethostname", (b"host", 4)), ("setdomainname", (b"host", 4)),
             ("quotactl", (0x800007, b"/tmp", 0, None)), ("quotactl_fd", (0, 0x800007, 0, None)),
             ("lookup_dcookie", (0, None, 0)), ("uselib", (b"/lib/x86_64-linux-gnu/libc.so.6",)), ("vhangup", ()))
    for name, a in calls:
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} returned {r} (errno {e})")
    return stopped(f"all {len(calls)} refused with EPERM")
