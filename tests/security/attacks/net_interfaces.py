"""Find a network interface other than loopback."""
def main(args):
    names = [n for _, n in socket.if_nameindex()]
    if names != ["lo"]:
        return escaped("interfaces: " + ", ".join(names))
    return stopped("only lo")
