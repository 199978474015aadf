"""Open raw IP sockets (spoofing, sniffing)."""
def main(args):
    return fails("raw socket", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
