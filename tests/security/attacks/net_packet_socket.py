"""Open an AF_PACKET socket (raw frames): the filter refuses the family."""
# denied: socket
def main(args):
    return fails("packet socket", socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0, errnos=(errno.EPERM,))
