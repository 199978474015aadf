"""Learn host paths and devices from the mount table: where the rootfs lives
on the host, the host's disks and filesystems."""
def main(args):
    p = args.params
    needles = [p["rootfs"], p["secret_path"].rsplit("/", 1)[0]] + p["host_block_devices"]
    host_disk_fs = {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "9p", "virtiofs", "nfs", "nfs4"}
    for table in ("/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/self/mounts"):
        try:
            with open(table) as f:
                text = f.read()
        except OSError as e:
            continue
        for needle in needles:
            if needle and needle in text:
                return escaped(f"{table} names {needle}")
        for line in text.splitlines():
            fields = line.split(" - ")[-1].split() if " - " in line else line.split()[2:3]
            if fields and fields[0] in host_disk_fs:
                return escaped(f"{table} shows a host {fields[0]} filesystem: {line[:200]}")
    return stopped("the mount table names no host path, disk or disk filesystem")
