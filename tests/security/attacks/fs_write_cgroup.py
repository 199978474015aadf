"""Raise the sandbox's own limits or escape its cgroup through cgroupfs."""
# denied: mount
def main(args):
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/pids.max",
                 "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/unified/cgroup.procs"):
        try:
            with open(path, "w") as f:
                f.write("max")
            return escaped("wrote " + path)
        except OSError:
            pass
    MS_NOSUID = 2
    r, e = syscall("mount", b"cgroup2", b"/tmp", b"cgroup2", MS_NOSUID, None)
    if r == 0:
        return escaped("mounted cgroup2")
    return stopped("no cgroup file is writable")
