"""Send and receive out-of-band data on a unix stream socket, the path of
CVE-2025-38236 (a use-after-free that took a browser's sandbox into the
kernel). Every send and receive call with MSG_OOB must be refused with
EPERM, whatever its other flags; plain data must still flow."""
# denied: sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg
def main(args):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    oob = socket.MSG_OOB
    attempts = (("send", lambda: a.send(b"x", oob)), ("recv", lambda: b.recv(1, oob | socket.MSG_DONTWAIT)),
                ("sendmsg", lambda: a.sendmsg([b"x"], [], oob)), ("recvmsg", lambda: b.recvmsg(1, 0, oob)))
    for name, attempt in attempts:
        try:
            attempt()
            return escaped(f"{name} with MSG_OOB succeeded")
        except PermissionError:
            pass
        except OSError as e:
            return escaped(f"{name} with MSG_OOB reached the kernel: {e}")
    msgs = (ctypes.c_char * 64)()
    for name in ("sendmmsg", "recvmmsg"):
        r, e = syscall(name, a.fileno(), msgs, 1, oob | socket.MSG_DONTWAIT, 0)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"{name} with MSG_OOB returned {r} (errno {e})")
    a.send(b"y")
    if b.recv(1) != b"y":
        return escaped("plain data did not flow: the test proves nothing")
    return stopped(f"{len(attempts) + 2} calls with MSG_OOB refused with EPERM; plain data flows")
