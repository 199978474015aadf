# profile: egress
"""Go around the egress proxy: connect directly, take over its port, find
its listening socket, or confuse its parsers into forwarding to loopback."""
def main(args):
    port = args.params["host_port"]
    # Only lo exists here: the host's service is not on it, and nothing else
    # is routed.
    for addr, expected in (("127.0.0.1", errno.ECONNREFUSED), ("10.0.0.1", errno.ENETUNREACH),
                           ("192.0.2.1", errno.ENETUNREACH)):
        failure = connect_error(socket.AF_INET, addr, port, expected, timeout=2)
        if failure:
            return escaped("going around the proxy: " + failure)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 3128))
        return escaped("bound the proxy's port: the workload could impersonate the proxy")
    except OSError:
        pass
    finally:
        s.close()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:") and int(fd) > 2:
            return escaped(f"an inherited socket at fd {fd}")
    tricks = [
        f"GET http://evil.example@127.0.0.1:{port}/ HTTP/1.1\r\n\r\n",
        f"GET http://127.0.0.1:{port}#@evil.example/ HTTP/1.1\r\n\r\n",
        f"GET /http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",
        f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
        f"CONNECT 127.0.0.1 :{port} HTTP/1.1\r\n\r\n",
        f"CONNECT 127.0.0.1:{port}\nHost: x\n\n",
        f"GET http://[::ffff:127.0.0.1]:{port}/ HTTP/1.1\r\n\r\n",
        f"CONNECT %31%32%37.0.0.1:{port} HTTP/1.1\r\n\r\n",
        f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n" + "X: " + "a" * 20000 + "\r\n\r\n",
    ]
    for trick in tricks:
        answer = proxy_exchange(trick.encode(), timeout=15)
        if answer.startswith(b"HTTP/1.1 200") or answer.startswith(b"HTTP/1.0"):
            return escaped(f"forwarded: {trick[:80]!r}")
        # The bait service never answers, so a forwarded request would end
        # in a 502/504 or a timeout: only the proxy's own 4xx is a refusal.
        if not answer.startswith(b"HTTP/1.1 4"):
            return escaped(f"not refused: {trick[:80]!r} got {answer[:120]!r}")
    if socks5_reply("127.0.0.1", port) == 0:
        return escaped("SOCKS5 reached loopback")
    return stopped("no direct route, the proxy's port and socket are out of reach, every trick refused")
