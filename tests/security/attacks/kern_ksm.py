"""Opt in to KSM, which (where the host runs it) merges identical pages of
every process that opted in, other tenants' runs included: a write to a
merged page takes longer, so one run learns what another holds.
prctl(PR_SET_MEMORY_MERGE) must be refused with EPERM, and
madvise(MADV_MERGEABLE) must do nothing: the mapping must not be marked
mergeable (`mg` in its VmFlags), as the kernel marks it otherwise."""
# denied: prctl
import mmap

PR_SET_MEMORY_MERGE, MADV_MERGEABLE = 67, 12


def vm_flags(addr):
    """The VmFlags of the mapping at addr, from /proc/self/smaps."""
    found = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0] and not line.startswith("VmFlags"):
                found = int(line.split("-", 1)[0], 16) == addr
            elif found and line.startswith("VmFlags:"):
                return line.split()[1:]
    return None


def main(args):
    for arg in (PR_SET_MEMORY_MERGE, PR_SET_MEMORY_MERGE | (1 << 32)):
        r, e = syscall("prctl", arg, 1, 0, 0, 0)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"prctl({arg:#x}, 1) returned {r} (errno {e})")
    size = 1 << 20
    area = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(area))
    r, e = syscall("madvise", addr, size, MADV_MERGEABLE)
    if r != 0:
        return escaped(f"madvise(MADV_MERGEABLE) returned {r} (errno {e}), not the filter's no-op")
    flags = vm_flags(addr)
    if flags is None:
        return escaped("the mapping is not in /proc/self/smaps: the test proves nothing")
    if "mg" in flags:
        return escaped(f"the mapping was marked mergeable: {' '.join(flags)}")
    return stopped("PR_SET_MEMORY_MERGE refused; MADV_MERGEABLE left the mapping unmarked")
