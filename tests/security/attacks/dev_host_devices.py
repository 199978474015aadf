"""Open raw host devices (memory, disks, kernel log)."""
def main(args):
    for path in ("/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/kmsg", "/dev/dri/card0"):
        try:
            os.close(os.open(path, os.O_RDONLY))
            return escaped("opened " + path)
        except OSError:
            pass
    allowed = {"null", "zero", "full", "random", "urandom", "tty", "shm", "pts", "ptmx", "fd", "stdin", "stdout", "stderr", "core"}
    extra = sorted(set(os.listdir("/dev")) - allowed)
    if extra:
        return escaped("unexpected devices: " + ", ".join(extra))
    return stopped("only the minimal /dev")
