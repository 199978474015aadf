"""Find a network interface other than loopback: through netlink (refused,
so an error), /proc/net/dev and /proc/net/if_inet6. Each list that can be
read must be lo alone, and /proc/net/dev must be readable and list lo: a
check that saw nothing would prove nothing."""
def main(args):
    try:
        names = [n for _, n in socket.if_nameindex()]
        if names != ["lo"]:
            return escaped("if_nameindex lists " + ", ".join(names))
    except OSError:
        pass  # netlink is refused
    with open("/proc/net/dev") as f:
        listed = [line.split(":")[0].strip() for line in f.read().splitlines()[2:]]
    if listed != ["lo"]:
        return escaped("/proc/net/dev lists " + (", ".join(listed) or "nothing: the check proves nothing"))
    try:
        with open("/proc/net/if_inet6") as f:
            v6 = sorted({line.split()[-1] for line in f if line.strip()})
    except FileNotFoundError:
        v6 = []  # IPv6 off in the kernel
    if v6 not in ([], ["lo"]):
        return escaped("/proc/net/if_inet6 lists " + ", ".join(v6))
    return stopped("only lo")
