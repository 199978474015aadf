# profile: egress
"""Reach the host's loopback service through the egress proxy, whose rules
allow the service's port for "the whole Internet" (0.0.0.0/0, ::/0) and for
the name localhost: every spelling of loopback, in every protocol, must be
refused by deny_private."""
def main(args):
    port = args.params["host_port"]
    hosts = ["127.0.0.1", "127.1.2.3", "0.0.0.0", "::1", "::ffff:127.0.0.1", "::ffff:0.0.0.0",
             "64:ff9b::7f00:1", "2002:7f00:1::1", "::127.0.0.1", "localhost", "LOCALHOST.",
             "127.1", "2130706433", "0x7f000001", "0", "127.0.0.1.nip.io"]
    for host in hosts:
        literal = ":" in host
        authority = f"[{host}]:{port}" if literal else f"{host}:{port}"
        answer = proxy_exchange(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        if answer.startswith(b"HTTP/1.1 200"):
            return escaped(f"CONNECT {authority} was tunnelled")
        answer = proxy_exchange(f"GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        if answer.startswith(b"HTTP/1.1 200") or answer.startswith(b"HTTP/1.0"):
            return escaped(f"GET http://{authority}/ was forwarded")
        # Refused (40x), or, for a name allowed whose addresses are refused,
        # told as a name that does not resolve (502), so that it cannot map
        # an internal zone; never anything else.
        refused = answer.startswith(b"HTTP/1.1 40") or (
            answer.startswith(b"HTTP/1.1 502") and b"cannot resolve" in answer)
        if not refused:
            return escaped(f"unexpected answer for {authority}: {answer[:200]!r}")
        if socks5_reply(host, port) == 0:
            return escaped(f"SOCKS5 CONNECT {authority} succeeded")
    return stopped(f"{len(hosts)} spellings of loopback refused in CONNECT, HTTP and SOCKS5")
