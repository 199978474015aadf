"""Add inotify watches until host root, charged for every run's, has none
left (its quota is about 1 % of memory's worth, up to 1 048 576): the
host's own file watchers would then fail with ENOSPC."""
# The default profile's limits.inotify_watches.
LIMIT = 8192
IN_CREATE = 0x100
def main(args):
    fd = _libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        return escaped(f"precondition: no inotify instance: {errno.errorcode.get(ctypes.get_errno())}")
    os.mkdir("/tmp/watched")
    watches = 0
    err = 0
    while watches < LIMIT + 100:
        path = b"/tmp/watched/%d" % watches
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        if _libc.inotify_add_watch(fd, path, IN_CREATE) < 0:
            err = ctypes.get_errno()
            break
        watches += 1
    os.close(fd)
    if watches == LIMIT and err == errno.ENOSPC:
        return stopped(f"ENOSPC after {watches} watches, this run's quota")
    return escaped(f"{watches} watches, then {errno.errorcode.get(err, err)} (quota {LIMIT})")
