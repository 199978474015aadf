"""Use a file descriptor inherited from the supervisor."""
def main(args):
    extra = []
    for fd in os.listdir("/proc/self/fd"):
        n = int(fd)
        if n <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        # 3 is the result pipe of the agent runner, and the only pipe past
        # stdio; the listing's own fd is a directory in /proc.
        if target.startswith("/proc/") or (n == 3 and target.startswith("pipe:")):
            continue
        extra.append(f"{fd} -> {target}")
    if extra:
        return escaped("inherited fds: " + ", ".join(extra))
    return stopped("only stdio, the result pipe and our own fds are open")
