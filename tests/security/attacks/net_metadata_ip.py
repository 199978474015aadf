"""Reach the cloud metadata service (169.254.169.254) and other outside addresses."""
def main(args):
    for addr in ("169.254.169.254", "10.0.0.1", "8.8.8.8"):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((addr, 80))
            return escaped("connected to " + addr)
        except OSError:
            pass
        finally:
            s.close()
    return stopped("no route out")
