"""Reach a service listening on the host's 127.0.0.1 (and ::1, and the
unspecified address, which Linux routes to the local host). The sandbox's
own loopback has no listener there: the connect must be refused at once."""
def main(args):
    port = args.params["host_port"]
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"), (socket.AF_INET, "0.0.0.0")):
        failure = connect_error(family, addr, port, errno.ECONNREFUSED)
        if failure:
            return escaped(failure)
    return stopped("127.0.0.1, ::1 and 0.0.0.0 refused at once (ECONNREFUSED)")
