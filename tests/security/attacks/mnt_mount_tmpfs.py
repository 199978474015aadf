"""Mount a filesystem (tmpfs, proc, or the host's disk)."""
# denied: mount
def main(args):
    for src, target, fstype in ((b"none", b"/tmp", b"tmpfs"), (b"proc", b"/tmp", b"proc"), (b"/dev/sda1", b"/tmp", b"ext4")):
        r, e = syscall("mount", src, target, fstype, 0, None)
        if r == 0:
            return escaped("mounted " + fstype.decode())
    return stopped("mount refused")
