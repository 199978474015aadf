"""Open file descriptors without bound."""
def main(args):
    fds = []
    try:
        for _ in range(100000):
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        n = len(fds)
        for fd in fds:
            os.close(fd)
        return stopped(f"{e.strerror} after {n} fds")
    return escaped(f"{len(fds)} fds open")
