"""Open file descriptors without bound."""
# The default profile's open_files.
LIMIT = 256
def main(args):
    fds = []
    try:
        for _ in range(100000):
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        highest = max(fds, default=-1)
        for fd in fds:
            os.close(fd)
        if e.errno != errno.EMFILE or highest >= LIMIT:
            return escaped(f"{errno.errorcode.get(e.errno, e.errno)} after fd {highest} (limit {LIMIT})")
        return stopped(f"EMFILE after {len(fds)} fds, the highest {highest}")
    return escaped(f"{len(fds)} fds open")
