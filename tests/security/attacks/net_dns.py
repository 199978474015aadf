"""Resolve names (DNS exfiltration) — must fail at once, not after a timeout."""
def main(args):
    start = time.monotonic()
    try:
        socket.getaddrinfo("example.com", 443)
        return escaped("example.com resolved")
    except OSError:
        pass
    took = time.monotonic() - start
    if took > 1.0:
        return escaped(f"resolution failed only after {took:.1f} s")
    return stopped(f"resolution failed in {took * 1000:.0f} ms")
