"""Lower the core limit to 0, so that a crash hands the run's memory to the
host's core_pattern helper: a pipe (systemd-coredump, apport, run as root)
ignores a limit of 0 and aborts the dump only at exactly 1. The limit must
read 1, soft and hard; setrlimit and prlimit64 with a new RLIMIT_CORE must be
refused with EPERM (also with junk above the resource's low 32 bits, which
is all the kernel reads), and Python's resource.setrlimit must fail; reading
the limit through prlimit64 must still work."""
# denied: setrlimit prlimit64
import resource


def main(args):
    if resource.getrlimit(resource.RLIMIT_CORE) != (1, 1):
        return escaped(f"RLIMIT_CORE is {resource.getrlimit(resource.RLIMIT_CORE)}, not (1, 1)")
    zero = (ctypes.c_ulong * 2)(0, 0)
    old = (ctypes.c_ulong * 2)(7, 7)
    calls = (("setrlimit", (resource.RLIMIT_CORE, zero)), ("prlimit64", (0, resource.RLIMIT_CORE, zero, 0)),
             ("prlimit64", (0, resource.RLIMIT_CORE | (1 << 32), zero, old)))
    for name, a in calls:
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} of RLIMIT_CORE returned {r} (errno {e})")
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        return escaped("resource.setrlimit(RLIMIT_CORE, (0, 0)) succeeded")
    except (OSError, ValueError):
        pass
    r, e = syscall("prlimit64", 0, resource.RLIMIT_CORE, 0, old)
    if r != 0 or tuple(old) != (1, 1):
        return escaped(f"reading RLIMIT_CORE through prlimit64 gave {r} (errno {e}), {tuple(old)}")
    if resource.getrlimit(resource.RLIMIT_CORE) != (1, 1):
        return escaped(f"RLIMIT_CORE became {resource.getrlimit(resource.RLIMIT_CORE)}")
    return stopped(f"RLIMIT_CORE stays (1, 1); {len(calls)} calls and resource.setrlimit refused")
