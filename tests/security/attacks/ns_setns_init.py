"""Join another process's namespaces with setns: PID 1's, or (to reach the
filter whatever /proc allows) this process's own."""
# denied: setns
def main(args):
    tried = []
    for pid in ("1", "self"):
        for ns in ("mnt", "net", "user", "pid", "uts", "ipc", "cgroup"):
            try:
                fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY)
            except OSError as e:
                tried.append(f"{pid}/{ns}: open {errno.errorcode.get(e.errno, e.errno)}")
                continue
            r, e = syscall("setns", fd, 0)
            os.close(fd)
            if r == 0:
                return escaped(f"setns {pid}/{ns}")
            tried.append(f"{pid}/{ns}: {errno.errorcode.get(e, e)}")
    return stopped("setns refused: " + ", ".join(tried))
