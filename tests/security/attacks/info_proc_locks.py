"""Read the host's file locks: /proc/locks lists every open file description
lock on the host whatever the reader's pid namespace, with the device and
inode of the locked file, and a run can use lock ranges to signal another."""
def main(args):
    start = str(args.params["ofd_lock_start"])
    try:
        with open("/proc/locks") as f:
            text = f.read()
    except OSError as e:
        return stopped(f"/proc/locks: {e.strerror}")
    for line in text.splitlines():
        if "OFDLCK" in line and start in line.split():
            return escaped(f"/proc/locks shows the host's lock: {line}")
    return stopped(f"/proc/locks lists {len(text.splitlines())} locks, none of the host's")
