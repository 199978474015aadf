"""Reach a service listening on the host's 127.0.0.1."""
def main(args):
    s = socket.socket()
    s.settimeout(3)
    return fails("connect 127.0.0.1:" + str(args.params["host_port"]), s.connect, ("127.0.0.1", args.params["host_port"]))
