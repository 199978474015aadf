"""Inject keystrokes into the terminal with TIOCSTI, also with junk in the
request's upper 32 bits, which the kernel ignores."""
# denied: ioctl
def main(args):
    TIOCSTI = 0x5412
    c = ctypes.c_char(b"x")
    for request in (TIOCSTI, TIOCSTI | 1 << 32):
        for fd in (0, 1, 2):
            r, e = syscall("ioctl", fd, request, ctypes.byref(c))
            if r == 0:
                return escaped(f"TIOCSTI ({request:#x}) on fd {fd} succeeded")
            if e != errno.EPERM:
                return escaped(f"TIOCSTI ({request:#x}) on fd {fd} reached the driver (errno {e})")
    return stopped("TIOCSTI refused with EPERM")
