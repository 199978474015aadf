"""Reach the cloud metadata service (169.254.169.254) and other outside
addresses. With only lo there is no route: the connect must fail at once."""
def main(args):
    addrs = ((socket.AF_INET, "169.254.169.254"), (socket.AF_INET, "10.0.0.1"), (socket.AF_INET, "8.8.8.8"),
             (socket.AF_INET6, "fd00:ec2::254"))
    for family, addr in addrs:
        failure = connect_error(family, addr, 80, errno.ENETUNREACH, timeout=2)
        if failure:
            return escaped(failure)
    return stopped(f"{len(addrs)} outside addresses unreachable at once (ENETUNREACH)")
