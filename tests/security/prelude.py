# Shared by every attack in attacks/: raw system calls through ctypes and the
# two verdicts. An attack's main(args) returns stopped(...) when the defence
# held and escaped(...) when it got through; args.params holds what the
# harness planted on the host (secret_path, secret, host_pid, host_port,
# abstract, marker).
import ctypes
import errno
import os
import socket
import struct
import sys
import time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# x86_64 system call numbers.
NR = {
    "ioctl": 16, "clone": 56, "ptrace": 101, "syslog": 103, "personality": 135,
    "pivot_root": 155, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165,
    "umount2": 166, "swapon": 167, "reboot": 169, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "clock_settime": 227, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "clone3": 435, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "process_vm_writev": 311,
    "swapoff": 168, "adjtimex": 159, "clock_adjtime": 305, "sethostname": 170, "setdomainname": 171,
    "quotactl": 179, "quotactl_fd": 443, "lookup_dcookie": 212, "uselib": 134, "vhangup": 153,
    "socket": 41, "socketpair": 53, "modify_ldt": 154, "statmount": 457, "listmount": 458, "mseal": 462,
    "open_tree_attr": 467, "file_getattr": 468, "io_setup": 206, "io_destroy": 207, "io_getevents": 208,
    "io_submit": 209, "memfd_secret": 447, "open": 2, "openat": 257, "fcntl": 72, "openat2": 437,
    "mmap": 9, "madvise": 28, "shmget": 29, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47,
    "prctl": 157, "setrlimit": 160, "recvmmsg": 299, "prlimit64": 302, "sendmmsg": 307, "memfd_create": 319,
}


def syscall(name, *args):
    """(result, errno) of a raw system call."""
    ctypes.set_errno(0)
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = _libc.syscall(ctypes.c_long(NR[name]), *cargs)
    return r, ctypes.get_errno()


def stopped(detail):
    return {"stopped": True, "detail": detail}


def escaped(detail):
    return {"stopped": False, "detail": detail}


def refused(name, *args, errnos=(errno.EPERM,)):
    """The call must fail with one of errnos (what the seccomp rule answers)."""
    r, e = syscall(name, *args)
    if r == -1 and e in errnos:
        return stopped(f"{name}: {errno.errorcode.get(e, e)}")
    return escaped(f"{name} returned {r} (errno {e})")


def fails(what, fn, *args, errnos=None):
    """fn(*args) must raise OSError, with one of errnos when given (an error
    for another reason proves nothing); anything else is an escape."""
    try:
        result = fn(*args)
    except OSError as e:
        if errnos and e.errno not in errnos:
            return escaped(f"{what}: {e!r}, not {'/'.join(errno.errorcode[n] for n in errnos)}")
        return stopped(f"{what}: {e.strerror or e}")
    return escaped(f"{what} succeeded: {result!r}"[:300])


def connect_error(family, addr, port, expected, timeout=3):
    """None when a TCP connect to (addr, port) fails at once (under 2 s) with
    errno expected (ECONNREFUSED: nobody listens; ENETUNREACH: no route);
    else what happened instead (a timeout, or a late answer, means the
    packets went somewhere)."""
    start = time.monotonic()
    try:
        s = socket.socket(family)
    except OSError as e:
        return f"precondition: no {family.name} socket: {e!r}"
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        return f"connected to {addr}:{port}"
    except OSError as e:
        took = time.monotonic() - start
        if e.errno != expected:
            return f"{addr}:{port}: {e!r}, not {errno.errorcode[expected]}"
        return None if took < 2.0 else f"{addr}:{port}: {errno.errorcode[expected]} only after {took:.1f} s"
    finally:
        s.close()


def reads_secret(path, secret):
    """True when path can be read and holds the host's secret."""
    try:
        with open(path, "rb") as f:
            return secret.encode() in f.read(1 << 20)
    except OSError:
        return False


# The egress proxy of a sandbox with `network.mode: egress` (attacks with
# `# profile: egress`).
PROXY = ("127.0.0.1", 3128)


def proxy_exchange(data, timeout=10):
    """Sends raw bytes to the egress proxy; returns what it answered."""
    s = socket.create_connection(PROXY, timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
            if out.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in out:
                return out  # a tunnel is open: that is all we need to know
    except OSError as e:
        return ("ERR " + str(e)).encode()
    finally:
        s.close()


def socks5_reply(host, port):
    """The SOCKS5 reply code for CONNECT host:port (IPv4/IPv6 literals as
    such, anything else as a domain)."""
    s = socket.create_connection(PROXY, timeout=10)
    try:
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            return -1
        try:
            addr = b"\x01" + socket.inet_pton(socket.AF_INET, host)
        except OSError:
            try:
                addr = b"\x04" + socket.inet_pton(socket.AF_INET6, host)
            except OSError:
                addr = b"\x03" + bytes([len(host)]) + host.encode()
        s.sendall(b"\x05\x01\x00" + addr + struct.pack(">H", port))
        reply = s.recv(10)
        return reply[1] if len(reply) >= 2 else -1
    except OSError:
        return -1
    finally:
        s.close()
