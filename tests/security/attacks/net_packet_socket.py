"""Open an AF_PACKET socket (raw frames)."""
def main(args):
    return fails("packet socket", socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0)
