"""Give the caller's terminal another line discipline (N_NULL leaves it dead)."""
# denied: ioctl
def main(args):
    TIOCSETD = 0x5423
    N_NULL = 27
    r, e = syscall("ioctl", 1, TIOCSETD, ctypes.byref(ctypes.c_int(N_NULL)))
    if r == -1 and e == errno.EPERM:
        return stopped("TIOCSETD refused")
    return escaped(f"TIOCSETD returned {r} (errno {e})")
