"""Make every read of a rootfs file go to the host's disk by dropping its
cached pages between reads: posix_fadvise(POSIX_FADV_DONTNEED) and a pread
in a loop read 1.9 GB of the host's disk in 1.5 s. The advice must succeed
and do nothing: reading the file again reads no block from the disk (the
kernel counts the process's block reads in ru_inblock).

ru_inblock also counts the interpreter's own page faults and whatever the
host's memory pressure evicted meanwhile (CI saw 32 blocks once), so the
attack tries three times and counts as dropped only a reread of at least a
quarter of the file in every try; advice that works rereads all of it."""
def main(args):
    import resource
    path = "/usr/lib/x86_64-linux-gnu/liblapack.so.3"
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        file_blocks = size // 512
        reread = []
        for _ in range(3):
            os.pread(fd, size, 0)  # cached now
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_inblock
            os.pread(fd, size, 0)
            reread.append(resource.getrusage(resource.RUSAGE_SELF).ru_inblock - before)
    finally:
        os.close(fd)
    if min(reread) >= file_blocks // 4:
        return escaped(f"reading {path} ({file_blocks} blocks) again read {reread} blocks "
                       "from the disk: its cached pages were dropped")
    return stopped(f"posix_fadvise(DONTNEED) left {path} cached: rereads read {reread} "
                   f"of its {file_blocks} blocks from the disk")
