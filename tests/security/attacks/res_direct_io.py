"""Read the host's disk past the page cache: O_DIRECT reads of a rootfs file
go to the disk every time (7 GiB in 3 s, with almost no CPU or memory
charged to the run). open, openat and fcntl(F_SETFL) with O_DIRECT must
answer EINVAL, and openat2 (whose flags seccomp cannot see) ENOSYS; the
same file opens without O_DIRECT, so the refusal is the filter's."""
def main(args):
    import fcntl
    O_DIRECT, AT_FDCWD, F_SETFL = 0o40000, -100, 4
    path = ctypes.c_char_p(b"/usr/bin/env")
    fd = os.open("/usr/bin/env", os.O_RDONLY)
    try:
        for name, a, want in (("open", (path, os.O_RDONLY | O_DIRECT), errno.EINVAL),
                              ("openat", (AT_FDCWD, path, os.O_RDONLY | O_DIRECT), errno.EINVAL),
                              ("fcntl", (fd, F_SETFL, O_DIRECT), errno.EINVAL),
                              ("fcntl", (fd, F_SETFL | (1 << 32), O_DIRECT), errno.EINVAL)):  # the kernel reads 32 bits
            verdict = refused(name, *a, errnos=(want,))
            if not verdict["stopped"]:
                return verdict
        how = (ctypes.c_uint64 * 3)(os.O_RDONLY | O_DIRECT, 0, 0)
        verdict = refused("openat2", AT_FDCWD, path, ctypes.byref(how), 24, errnos=(errno.ENOSYS,))
        if not verdict["stopped"]:
            return verdict
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        if flags & O_DIRECT:
            return escaped(f"the fd has O_DIRECT: flags {flags:#o}")
    finally:
        os.close(fd)
    return stopped("O_DIRECT: EINVAL from open, openat and fcntl; openat2: ENOSYS")
