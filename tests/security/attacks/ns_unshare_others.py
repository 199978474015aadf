"""Create new mount, network, pid, uts, ipc or cgroup namespaces."""
# denied: unshare
def main(args):
    for name, flag in (("mount", 0x20000), ("net", 0x40000000), ("pid", 0x20000000), ("uts", 0x4000000),
                       ("ipc", 0x8000000), ("cgroup", 0x2000000), ("time", 0x80)):
        r, e = syscall("unshare", flag)
        if r == 0:
            return escaped(f"unshare {name} succeeded")
    return stopped("every unshare refused")
