"""Use TIOCLINUX (console selection and paste)."""
# denied: ioctl
def main(args):
    TIOCLINUX = 0x541C
    arg = ctypes.c_char(b"\x02")
    r, e = syscall("ioctl", 0, TIOCLINUX, ctypes.byref(arg))
    if r == -1 and e == errno.EPERM:
        return stopped("TIOCLINUX refused")
    return escaped(f"TIOCLINUX returned {r} (errno {e})")
