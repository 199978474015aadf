"""Load or remove a kernel module."""
# denied: init_module finit_module delete_module
def main(args):
    for name, a in (("init_module", (None, 0, b"")), ("finit_module", (0, b"", 0)), ("delete_module", (b"ext4", 0))):
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} returned {r} (errno {e})")
    return stopped("module calls refused")
