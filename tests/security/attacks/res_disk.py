"""Fill the writable places (/tmp, /dev/shm, the workspace) until the host's
disk or memory runs out, in files each under the file size limit (64 MiB),
so that only each mount's own cap (64 MiB by default) can stop it."""
def main(args):
    chunk = b"x" * (16 << 20)
    filled = []
    for d in ("/tmp", "/dev/shm", "/workspace"):
        mib = 0
        try:
            for i in range(32):  # 512 MiB in all
                with open(f"{d}/fill-{i}", "wb") as f:
                    f.write(chunk)
                mib += 16
            return escaped(f"{d} took {mib} MiB")
        except OSError as e:
            # The cap, not some other failure, and at the cap (the last file
            # may have been cut part way).
            if e.errno != errno.ENOSPC or mib > 64:
                return escaped(f"{d}: {errno.errorcode.get(e.errno, e.errno)} after {mib} MiB")
            filled.append(f"{d}: ENOSPC after {mib} MiB")
        for name in os.listdir(d):
            if name.startswith("fill-"):
                os.unlink(f"{d}/{name}")
    return stopped(", ".join(filled))
