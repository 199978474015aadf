"""Trigger sysrq or read kernel memory through /proc."""
def main(args):
    try:
        with open("/proc/sysrq-trigger", "w") as f:
            f.write("h")
        return escaped("wrote /proc/sysrq-trigger")
    except OSError:
        pass
    try:
        with open("/proc/kcore", "rb") as f:
            if f.read(16):
                return escaped("read /proc/kcore")
    except OSError:
        pass
    return stopped("sysrq and kcore are masked")
