"""Reboot, swap, set the clock, turn on process accounting."""
# denied: reboot swapon settimeofday clock_settime acct
def main(args):
    ts = struct.pack("qq", 0, 0)
    for name, a in (("reboot", (0xfee1dead, 672274793, 0x1234567, None)), ("swapon", (b"/tmp/x", 0)),
                    ("settimeofday", (ts, None)), ("clock_settime", (0, ts)), ("acct", (b"/tmp/acct",))):
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} returned {r} (errno {e})")
    return stopped("all refused with EPERM")
