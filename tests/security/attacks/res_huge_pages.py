"""Take huge pages, which come from the host's hugetlb pool (or, with
vm.nr_overcommit_hugepages, its memory) and are charged to no memory cgroup:
a run limited to 32 MiB took a 128 MiB pool whole. mmap with MAP_HUGETLB,
memfd_create with MFD_HUGETLB and shmget with SHM_HUGETLB must be refused
with EPERM (a host without a pool says ENOMEM or succeeds: no proof). An
ordinary anonymous mapping must still work."""
# denied: mmap memfd_create shmget
MAP_HUGETLB, MFD_HUGETLB, SHM_HUGETLB = 0x40000, 4, 0o4000
PROT_RW, MAP_PRIVATE_ANON, IPC_CREAT = 3, 0x22, 0o1000


def main(args):
    size = 2 << 20
    calls = (("mmap", (0, size, PROT_RW, MAP_PRIVATE_ANON | MAP_HUGETLB, -1, 0)),
             ("memfd_create", (b"huge", MFD_HUGETLB)),
             ("shmget", (0, size, IPC_CREAT | SHM_HUGETLB | 0o600)))
    for name, a in calls:
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} with its huge-page flag returned {r} (errno {e})")
    r, e = syscall("mmap", 0, size, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
    if r == -1:
        return escaped(f"an ordinary mapping failed too (errno {e}): the test proves nothing")
    return stopped(f"all {len(calls)} huge-page requests refused with EPERM")
