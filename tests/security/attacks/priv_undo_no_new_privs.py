"""Clear no_new_privs or replace the seccomp filter."""
def main(args):
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 38, 22
    _libc.prctl.restype = ctypes.c_int
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0:
        with open("/proc/self/status") as f:
            if "NoNewPrivs:\t0" in f.read():
                return escaped("no_new_privs cleared")
    if _libc.prctl(PR_SET_SECCOMP, 0, 0, 0, 0) == 0:
        return escaped("seccomp disabled")
    return stopped("no_new_privs and the filter stay")
