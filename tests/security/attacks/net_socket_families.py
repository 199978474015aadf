"""Open sockets of families the network namespace does not confine or that
only add kernel attack surface: vsock (on a VM host it reaches the
hypervisor and other guests past any netns), AF_ALG, RDS, TIPC, CAN, XDP,
packet (also as AF_INET with SOCK_PACKET), key; multipath TCP (AF_INET or
AF_INET6 with IPPROTO_MPTCP, and any protocol of 256 or above: junk above a
protocol's low 32 bits); socketpair of anything but AF_UNIX. The filter must refuse each with EPERM (a kernel without the family
would say EAFNOSUPPORT: that is no proof), also with junk in the argument's
upper bits. Netlink of any protocol (routing, audit, uevents, socket
diagnostics, generic, netfilter, xfrm), whose queued messages no memory
cgroup is charged for, must answer EAFNOSUPPORT: every Linux has netlink,
so that answer is the filter's."""
# denied: socket socketpair
def main(args):
    AF_VSOCK, AF_ALG, AF_RDS, AF_TIPC, AF_CAN, AF_XDP, AF_PACKET, AF_KEY, AF_NETLINK = 40, 38, 21, 30, 29, 44, 17, 15, 16
    stream, dgram, seqpacket, raw = 1, 2, 5, 3
    calls = [("socket", (AF_VSOCK, stream, 0)), ("socket", (AF_VSOCK, dgram, 0)),
             ("socket", (AF_VSOCK | (1 << 32), stream, 0)), ("socket", (AF_ALG, seqpacket, 0)),
             ("socket", (AF_RDS, seqpacket, 0)), ("socket", (AF_TIPC, dgram, 0)), ("socket", (AF_CAN, dgram, 2)),
             ("socket", (AF_XDP, raw, 0)), ("socket", (AF_PACKET, dgram, 0)), ("socket", (AF_KEY, raw, 2)),
             ("socket", (0, stream, 0)), ("socket", (4096, stream, 0)),
             ("socket", (socket.AF_INET, 10, 0)),  # SOCK_PACKET: a packet socket under another name
             ("socket", (socket.AF_INET, stream, 262)), ("socket", (socket.AF_INET6, stream, 262)),  # MPTCP
             ("socket", (socket.AF_INET, stream, 6 | (1 << 32)))]
    # route, audit, kobject uevent, sock_diag, generic, netfilter, xfrm
    netlink = [(AF_NETLINK, raw, protocol) for protocol in (0, 9, 15, 4, 16, 12, 6)]
    calls.append(("socket", (AF_NETLINK | (1 << 32), raw, 0)))  # junk above: not netlink to the filter
    pair = (ctypes.c_int * 2)()
    for family in (AF_VSOCK, AF_TIPC, socket.AF_INET, AF_NETLINK):
        calls.append(("socketpair", (family, stream, 0, pair)))
    for name, a in calls:
        r, e = syscall(name, *a)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name}{tuple(x if isinstance(x, int) else '...' for x in a)} returned {r} (errno {e})")
    for a in netlink:
        r, e = syscall("socket", *a)
        if not (r == -1 and e == errno.EAFNOSUPPORT):
            return escaped(f"socket{a} returned {r} (errno {e})")
    return stopped(f"all {len(calls)} refused with EPERM, {len(netlink)} netlink with EAFNOSUPPORT")
