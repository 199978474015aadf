"""Replace a system binary or /etc/passwd in the rootfs."""
def main(args):
    for path in ("/usr/bin/python3", "/etc/passwd", "/bin/sh", "/opt/nsbox/runner.py"):
        try:
            with open(path, "ab"):
                return escaped(path + " opened for writing")
        except OSError:
            pass
    try:
        os.mkdir("/usr/evil")
        return escaped("created /usr/evil")
    except OSError:
        pass
    return stopped("the rootfs is read-only")
