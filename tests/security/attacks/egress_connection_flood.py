# profile: egress
"""Use the egress proxy as an amplifier: open far more connections than a
run may, and hold them open."""
def main(args):
    port = args.params["host_port"]
    held, refused = [], 0
    for _ in range(300):
        try:
            s = socket.create_connection(PROXY, timeout=5)
        except OSError:
            refused += 1
            continue
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        held.append(s)
    answers = []
    for s in held:
        s.settimeout(10)
        try:
            answers.append(s.recv(200))
        except OSError:
            answers.append(b"")
        s.close()
    if any(a.startswith(b"HTTP/1.1 200") for a in answers):
        return escaped("a tunnel to loopback opened")
    capped = sum(b"connection cap" in a for a in answers)
    if capped == 0:
        return escaped(f"300 requests and no connection cap ({refused} refused at connect)")
    return stopped(f"{capped} requests refused by the run's connection cap, the rest by deny_private")
