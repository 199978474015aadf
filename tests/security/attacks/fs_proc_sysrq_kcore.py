"""Trigger sysrq or read kernel memory through /proc."""
import stat


def main(args):
    try:
        st = os.stat("/proc/sysrq-trigger")
    except OSError:
        st = None  # a kernel without sysrq, or hidden
    # Masked means /dev/null bound over it: writes go nowhere.
    masked = st is not None and stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    if st is not None and not masked:
        try:
            with open("/proc/sysrq-trigger", "w") as f:
                f.write("h")  # help: harmless if it ever got through
            return escaped("wrote the real /proc/sysrq-trigger")
        except OSError:
            pass
    try:
        with open("/proc/kcore", "rb") as f:
            if f.read(16):
                return escaped("read /proc/kcore")
    except OSError:
        pass
    return stopped("sysrq-trigger " + ("masked by /dev/null" if masked else "absent or refused") + ", kcore unreadable")
