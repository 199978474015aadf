"""Make system calls newer than the seccomp policy, which a deny list would
allow unweighed: statmount and listmount (6.8), mseal (6.10), open_tree_attr
(6.15), file_getattr (6.17). Each must answer ENOSYS, as the filter's
`(newer)` rule does (on a kernel without the call, ENOSYS is the kernel's
own answer); a kernel with the call and no such rule gives EFAULT, EINVAL or
EBADF for these arguments."""
def main(args):
    calls = (("statmount", (0, 0, 0, 0)), ("listmount", (0, 0, 0, 0)), ("mseal", (1, 4096, 0)),
             ("open_tree_attr", (-1, 0, 0, 0, 0)), ("file_getattr", (-1, 0, 0, 0, 0)))
    for name, a in calls:
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.ENOSYS):
            return escaped(f"{name} returned {r} (errno {e})")
    return stopped(f"all {len(calls)} answered ENOSYS")
