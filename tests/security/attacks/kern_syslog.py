"""Read the kernel log (host addresses and activity)."""
# denied: syslog
def main(args):
    SYSLOG_ACTION_READ_ALL = 3
    buf = ctypes.create_string_buffer(4096)
    a = refused("syslog", SYSLOG_ACTION_READ_ALL, buf, 4096)
    if not a["stopped"]:
        return a
    for path in ("/dev/kmsg", "/proc/kmsg"):
        try:
            with open(path, "rb") as f:
                if f.read(1):
                    return escaped("read " + path)
        except OSError:
            pass
    return stopped("kernel log unreadable")
