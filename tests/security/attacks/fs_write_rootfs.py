"""Replace a system binary or /etc/passwd in the rootfs. Their owner (host
root) is no one in the sandbox, so a write fails on permissions alone: the
mounts under them must also be read-only, or a lost MS_RDONLY would go
unnoticed."""
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
    writable = [p for p in ("/", "/usr", "/usr/bin", "/etc", "/opt/nsbox") if not os.statvfs(p).f_flag & os.ST_RDONLY]
    if writable:
        return escaped("mounted read-write: " + ", ".join(writable))
    return stopped("the rootfs is read-only")
