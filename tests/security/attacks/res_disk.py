"""Fill the writable places (/tmp, /dev/shm, the workspace) until the host's
disk or memory runs out, in files each under the file size limit (64 MiB),
so that only each mount's own cap (64 MiB by default) can stop it."""
CAP = 64 << 20
def main(args):
    chunk = b"x" * (1 << 20)
    filled = []
    for d in ("/tmp", "/dev/shm", "/workspace"):
        try:
            for i in range(32):  # 512 MiB in all
                with open(f"{d}/fill-{i}", "wb") as f:
                    for _ in range(16):
                        f.write(chunk)
            return escaped(f"{d} took 512 MiB")
        except OSError as e:
            if e.errno != errno.ENOSPC:
                return escaped(f"{d}: {errno.errorcode.get(e.errno, e.errno)}, not ENOSPC")
        # What the mount holds at ENOSPC: the cap, not some other failure.
        names = [n for n in os.listdir(d) if n.startswith("fill-")]
        stored = sum(os.stat(f"{d}/{n}").st_size for n in names)
        if stored > CAP:
            return escaped(f"{d} held {stored >> 20} MiB at ENOSPC, past the {CAP >> 20} MiB cap")
        filled.append(f"{d}: ENOSPC at {stored / (1 << 20):.1f} MiB")
        for n in names:
            os.unlink(f"{d}/{n}")
    return stopped(", ".join(filled))
