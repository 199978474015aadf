"""Unmount /proc or a mask to uncover what is under it."""
# denied: umount2
def main(args):
    MNT_DETACH = 2
    for target in (b"/proc", b"/proc/sys", b"/tmp", b"/"):
        r, e = syscall("umount2", target, MNT_DETACH)
        if r == 0:
            return escaped("unmounted " + target.decode())
    return stopped("umount2 refused")
