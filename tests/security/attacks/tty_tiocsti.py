"""Inject keystrokes into the terminal with TIOCSTI."""
# denied: ioctl
def main(args):
    TIOCSTI = 0x5412
    c = ctypes.c_char(b"x")
    for fd in (0, 1, 2):
        r, e = syscall("ioctl", fd, TIOCSTI, ctypes.byref(c))
        if r == 0:
            return escaped(f"TIOCSTI on fd {fd} succeeded")
        if e != errno.EPERM:
            return escaped(f"TIOCSTI on fd {fd} reached the driver (errno {e})")
    return stopped("TIOCSTI refused with EPERM")
