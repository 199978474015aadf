"""Make every read of a rootfs file go to the host's disk by dropping its
cached pages between reads: posix_fadvise(POSIX_FADV_DONTNEED) and a pread
in a loop read 1.9 GB of the host's disk in 1.5 s. The advice must succeed
and do nothing: reading the file again reads no block from the disk (the
kernel counts the process's block reads in ru_inblock)."""
def main(args):
    import resource
    path = "/usr/lib/x86_64-linux-gnu/liblapack.so.3"
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        os.pread(fd, size, 0)  # cached now
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_inblock
        os.pread(fd, size, 0)
        blocks = resource.getrusage(resource.RUSAGE_SELF).ru_inblock - before
    finally:
        os.close(fd)
    if blocks > 0:
        return escaped(f"reading {path} again read {blocks} blocks from the disk: its cached pages were dropped")
    return stopped(f"posix_fadvise(DONTNEED) left all {size} bytes cached")
