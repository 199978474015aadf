"""Open pseudo-terminals until none are left. Every devpts instance but the
host's first draws on one host-wide pool (kernel.pty.max less
kernel.pty.reserve, about 3072): without a cap of its own, one run took
them all, and every other run's (and the host's containers') openpty then
failed with ENOSPC."""
# The cap of each sandbox's /dev/pts (max= of its devpts mount).
LIMIT = 16
def main(args):
    fds = []
    err = 0
    while len(fds) < 4000:
        try:
            fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
        except OSError as e:
            err = e.errno
            break
    for fd in fds:
        os.close(fd)
    if len(fds) == LIMIT and err == errno.ENOSPC:
        return stopped(f"ENOSPC after {len(fds)} ptys, this run's cap")
    return escaped(f"{len(fds)} ptys, then {errno.errorcode.get(err, err)} (cap {LIMIT})")
