"""Take every native AIO context of the host: io_setup's contexts are counted
host-wide (fs.aio-max-nr), so one run holding them all fails every other
user of AIO on the host (databases, QEMU). Each AIO call must answer ENOSYS."""
def main(args):
    ctx = ctypes.c_ulong(0)
    for name, a in (("io_setup", (65536, ctypes.byref(ctx))), ("io_submit", (0, 0, 0)),
                    ("io_getevents", (0, 0, 0, 0, 0)), ("io_destroy", (0,))):
        verdict = refused(name, *a, errnos=(errno.ENOSYS,))
        if not verdict["stopped"]:
            return verdict
    return stopped("io_setup, io_submit, io_getevents, io_destroy: ENOSYS")
