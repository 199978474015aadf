"""Join another process's namespaces with setns."""
def main(args):
    for ns in ("mnt", "net", "user", "pid"):
        try:
            fd = os.open(f"/proc/1/ns/{ns}", os.O_RDONLY)
        except OSError:
            continue
        r, e = syscall("setns", fd, 0)
        os.close(fd)
        if r == 0:
            return escaped("setns " + ns)
    return stopped("setns refused")
