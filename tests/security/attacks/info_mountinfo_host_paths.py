"""Learn host paths and devices from the mount table: where the rootfs lives
on the host, the host's disks and filesystems."""
# What nsbox mounts: the rootfs overlay, tmpfs, proc, devpts, and device
# nodes bound from devtmpfs (their path inside devtmpfs is their name).
OWN_FS = {"overlay", "tmpfs", "proc", "devpts", "devtmpfs"}
DEVICE_NODES = {"/null", "/zero", "/full", "/random", "/urandom", "/tty"}
def main(args):
    p = args.params
    needles = [p["rootfs"]] + p["host_block_devices"]
    read = 0
    for table in ("/proc/self/mountinfo", "/proc/1/mountinfo"):
        try:
            with open(table) as f:
                text = f.read()
        except OSError:
            continue
        read += 1
        for needle in needles:
            if needle and needle in text:
                return escaped(f"{table} names {needle}")
        for line in text.splitlines():
            pre, _, post = line.partition(" - ")
            root = pre.split()[3]
            fstype, source = post.split()[0], post.split()[1]
            if fstype not in OWN_FS:
                return escaped(f"{table} shows a {fstype} filesystem from {source}: {line[:200]}")
            if root != "/" and not (fstype == "devtmpfs" and root in DEVICE_NODES):
                return escaped(f"{table} shows a bind of {root} from {fstype}: {line[:200]}")
            if source.startswith("/"):
                return escaped(f"{table} names a host source {source}")
    if read == 0:
        return stopped("no mount table readable")
    return stopped("the mount table names no host path, disk or foreign filesystem")
