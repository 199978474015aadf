"""Find a network interface other than loopback (netlink, which lists them,
is refused: the answer is an error or lo alone)."""
def main(args):
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError as e:
        return stopped(f"interfaces cannot be listed: {e.strerror}")
    if names != ["lo"]:
        return escaped("interfaces: " + ", ".join(names))
    return stopped("only lo")
