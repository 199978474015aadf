"""Clear no_new_privs or replace the seccomp filter."""


def privs_status():
    """(NoNewPrivs, Seccomp) of this process, from /proc/self/status."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    return fields.get("NoNewPrivs", "?").strip(), fields.get("Seccomp", "?").strip()


def main(args):
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 38, 22
    _libc.prctl.restype = ctypes.c_int
    # Both calls fail whatever the sandbox did (no_new_privs cannot be
    # cleared, mode 0 is no seccomp mode): what counts is the state after.
    before = privs_status()
    if before != ("1", "2"):
        return escaped(f"not set to begin with: NoNewPrivs {before[0]}, Seccomp {before[1]}")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0)
    _libc.prctl(PR_SET_SECCOMP, 0, 0, 0, 0)
    after = privs_status()
    if after != before:
        return escaped(f"changed: NoNewPrivs {after[0]}, Seccomp {after[1]}")
    return stopped("no_new_privs and the filter stay")
