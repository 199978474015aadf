"""Hold inotify instances until host root, which the kernel charges for
every run's (it made their user namespaces), has none left: its own
programs and every other run would then get EMFILE from inotify_init."""
# The default profile's limits.inotify_instances; the host's quota is 128.
LIMIT = 8
def main(args):
    fds = []
    while len(fds) < 1000 and (fd := _libc.inotify_init1(os.O_CLOEXEC)) >= 0:
        fds.append(fd)
    err = ctypes.get_errno()
    for fd in fds:
        os.close(fd)
    if len(fds) == LIMIT and err == errno.EMFILE:
        return stopped(f"EMFILE after {len(fds)} instances, this run's quota")
    return escaped(f"{len(fds)} instances, then {errno.errorcode.get(err, err)} (quota {LIMIT})")
