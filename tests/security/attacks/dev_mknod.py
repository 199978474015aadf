"""Create a device node for host memory or disks."""
def main(args):
    import stat
    return fails("mknod /tmp/mem", os.mknod, "/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1))
