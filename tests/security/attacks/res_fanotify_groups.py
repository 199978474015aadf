"""Make fanotify groups, which an unprivileged process may since Linux 5.13
and which the kernel charges to host root (128 by default), as it does a
run's inotify instances."""
FAN_CLASS_NOTIF = 0
FAN_REPORT_FID = 0x200
def main(args):
    fd = _libc.fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID, os.O_RDONLY)
    err = ctypes.get_errno()
    if fd >= 0:
        os.close(fd)
        return escaped("a fanotify group was made")
    # EMFILE: the run's quota of 0 groups. EPERM would be a kernel without
    # unprivileged fanotify, which proves nothing of the quota.
    if err == errno.EMFILE:
        return stopped("EMFILE: this run's quota is no group")
    return escaped(f"precondition: fanotify_init failed with {errno.errorcode.get(err, err)}, not EMFILE")
