"""nsbox Python fork server (docs/ARCHITECTURE.md, "Fork server").

Runs as the workload of its own sandbox (its own user, mount, pid, net, ipc
and uts namespaces and cgroup, no capabilities, no_new_privs, a seccomp
filter), with the runner and json already imported. It never runs user code
itself. For each request on fd 3 it forks the run's PID 1 straight into
fresh namespaces of its own, before any user code exists:

  zygote -> init (PID 1 of the run, forkinit.c: C, as it shares the fork
            server's memory until it execs; the fork server waits, as after
            vfork), cloned into a new pid
            namespace and a new user namespace nested in the zygote's: says
            its pid (SCM_CREDENTIALS) and gets into the run's cgroup (moved
            by nsbox on cgroup v2; on v1 it writes "0" to the run's tasks
            files, which nsbox sends it); maps the same single uid and gid
            as the zygote's;
            unshares new mount, net, ipc, uts and cgroup namespaces (made in
            the run's cgroup, the cgroup namespace rooted at it); fresh
            /proc with its masks, fresh /tmp, /dev/shm, /dev/pts, workspace
            and profile tmpfs, lo up, hostname; hands nsbox a pidfd of
            itself; rlimits; drops every capability; no_new_privs; forks
            the workload and execs /opt/nsbox/nsbox-init, which only reaps,
            and exits when nsbox hangs up the run socket;
         -> workload (PID 2, forked by init, back in this file): stdio and
            fd 3 from the request, cwd, env, the run's seccomp filter last
            (its listener goes to nsbox), then the runner, exactly as
            `python3 runner.py` would run it.

The request is one SOCK_SEQPACKET message from nsbox: b"F" and the run's
settings as JSON, with the fds [run socket, stdin, stdout, stderr, result,
error, report]. Setup failures go to the error fd as nsbox's ChildFailure
(step, object, errno); init reports the workload's end on the report fd as
nsbox's InitReport. Both layouts are in include/nsbox/child_report.h.
"""
import ctypes
import errno
import gc
import json  # preloaded for user code; the settings are JSON too
import os
import signal
import socket
import struct
import sys

import runner  # /opt/nsbox is sys.path[0], as it is for runner.py itself

CONTROL_FD = 3
SETUP_FAILED_EXIT = 125  # kSetupFailedExit
MAX_REQUEST = 1 << 20
FD_COUNT = 7

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND = 4096
NO_DEV_SUID = MS_NOSUID | MS_NODEV

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
SYS_SECCOMP = 317
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long
# Calls through PyDLL keep the GIL held, as os.fork() does around fork().
_forkinit = ctypes.PyDLL("/opt/nsbox/forkinit.so")
_forkinit.nsbox_fork_run.restype = ctypes.c_long
_forkinit.nsbox_fork_run.argtypes = [ctypes.c_void_p]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SetupError(Exception):
    def __init__(self, step, obj, err):
        super().__init__(step)
        self.step, self.obj, self.err = step, obj, err


def _check(ret, step, obj):
    if ret < 0:
        raise SetupError(step, obj, ctypes.get_errno())
    return ret


def _set_cmdline(argv):
    """Rewrites this process's argv in place (what /proc/PID/cmdline shows),
    padded with NULs or cut to the space the original had."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49
    text = b"\0".join(a.encode() for a in argv)[: end - start - 1]
    ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)


def _set_name(name):
    """The process name (comm) ps and /proc/PID/status show."""
    buf = ctypes.create_string_buffer(name)
    _libc.prctl(PR_SET_NAME, ctypes.addressof(buf), 0, 0, 0)


def _report_failure(error_fd, step, obj, err):
    try:
        os.write(error_fd, struct.pack("48s4000si", step.encode()[:47], obj.encode()[:3999], err))
    except OSError:
        pass


class _Mount(ctypes.Structure):
    _fields_ = [("source", ctypes.c_char_p), ("target", ctypes.c_char_p), ("fstype", ctypes.c_char_p),
                ("flags", ctypes.c_ulong), ("data", ctypes.c_char_p), ("kind", ctypes.c_int)]


class _Rlimit(ctypes.Structure):
    _fields_ = [("resource", ctypes.c_int), ("soft", ctypes.c_ulonglong), ("hard", ctypes.c_ulonglong)]


class _Quota(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_ulonglong)]


class _Run(ctypes.Structure):
    """struct nsbox_run of forkinit.c."""
    _fields_ = [("fds", ctypes.c_int * FD_COUNT), ("control_fd", ctypes.c_int), ("uid", ctypes.c_uint),
                ("gid", ctypes.c_uint), ("mounts", ctypes.POINTER(_Mount)), ("mount_count", ctypes.c_int),
                ("workspace_out", ctypes.c_char_p), ("hostname", ctypes.c_char_p),
                ("rlimits", ctypes.POINTER(_Rlimit)), ("rlimit_count", ctypes.c_int),
                ("quotas", ctypes.POINTER(_Quota)), ("quota_count", ctypes.c_int)]


MOUNT_REQUIRED, MOUNT_OPTIONAL, MOUNT_MASK_FILE = 0, 1, 2


def _encode(text):
    return text.encode() if text is not None else None


def _run_plan(cfg, fds, uid, gid):
    """What PID 1 does for this run, as forkinit.c reads it. The mounts make
    what one run may write or see of other runs fresh for it; the rest
    (rootfs, binds, masks outside /proc) comes from the zygote's mount
    namespace, locked: the run's user namespace cannot unmount or change
    it."""
    mounts = [("proc", "/proc", "proc", NO_DEV_SUID | MS_NOEXEC, None, MOUNT_REQUIRED)]
    mounts += [("/dev/null", path, None, MS_BIND, None, MOUNT_MASK_FILE) for path in cfg["proc_mask_files"]]
    mounts += [("tmpfs", path, "tmpfs", MS_RDONLY | NO_DEV_SUID | MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1",
                MOUNT_OPTIONAL) for path in cfg["proc_mask_dirs"]]
    mounts.append(("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,max=16",
                   MOUNT_REQUIRED))
    mounts += [("tmpfs", t["target"], "tmpfs", t["flags"], t["data"], MOUNT_REQUIRED) for t in cfg["tmpfs"]]
    ws = cfg.get("workspace")
    if ws:
        mounts.append(("tmpfs", ws["path"], "tmpfs", NO_DEV_SUID,
                       "mode=0700,size=%d,nr_inodes=%d" % (ws["size"], ws["inodes"]), MOUNT_REQUIRED))
    run = _Run()
    run.fds[:] = fds
    run.control_fd = CONTROL_FD
    run.uid, run.gid = uid, gid
    run.mounts = (_Mount * len(mounts))(*[_Mount(_encode(a), _encode(b), _encode(c), d, _encode(e), k)
                                          for a, b, c, d, e, k in mounts])
    run.mount_count = len(mounts)
    run.workspace_out = _encode(ws["path"] + "/out") if ws else None
    run.hostname = cfg["hostname"].encode()
    # Python's resource module spells RLIM_INFINITY -1: as unsigned, all ones.
    run.rlimits = (_Rlimit * len(cfg["rlimits"]))(*[_Rlimit(r, s, h) for r, s, h in cfg["rlimits"]])
    run.rlimit_count = len(cfg["rlimits"])
    run.quotas = (_Quota * len(cfg["quotas"]))(*[_Quota(n.encode(), v) for n, v in cfg["quotas"]])
    run.quota_count = len(cfg["quotas"])
    return run


def _fork_run(run):
    """Clones the run's PID 1 (forkinit.c), which sets the run up and forks
    the workload. Returns PID 1's pid here and 0 in the workload. Python's
    own before- and after-fork steps run around it as os.fork() runs them;
    PyDLL keeps the GIL held throughout."""
    ctypes.pythonapi.PyOS_BeforeFork()
    try:
        pid = _forkinit.nsbox_fork_run(ctypes.byref(run))
    except BaseException:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        raise
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(-pid, os.strerror(-pid))
    return pid


def _load_seccomp(program, notify):
    """The run's filter, stacked on the zygote's: returns the listener fd
    (denied calls go to nsbox, which answers EPERM and counts them) or -1."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER if notify else 0
    fd = _check(_libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog)), "seccomp",
                "load filter")
    return fd if notify else -1


def _offer_listener(sock, listener):
    """Offers the seccomp listener by its number: nsbox takes it with
    pidfd_getfd (fd_passing.h), or answers 'S' and it is sent. Sent outright,
    it could be refused (ETOOMANYREFS) while another run of this host user
    holds more descriptors in flight than this process's RLIMIT_NOFILE."""
    try:
        # sendmsg, and read(): what an allow list with a listener names.
        sock.sendmsg([struct.pack("=ci", b"L", listener)])
        answer = os.read(sock.fileno(), 1)
        if answer == b"S":
            socket.send_fds(sock, [b"L"], [listener])
        elif answer != b"T":
            raise OSError(errno.EPROTO if answer else errno.EPIPE, "no answer to the offer")
    except OSError as e:
        raise SetupError("sendmsg", "seccomp listener", e.errno)


def _become_workload(cfg, fds, error_fd, sock):
    """PID 2: the runner, with the run's stdio and result fd; its seccomp
    filter is loaded last, as a started run's workload's is."""
    stdin, stdout, stderr, result = fds[1], fds[2], fds[3], fds[4]
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    try:
        os.chdir(cfg["cwd"])
    except OSError as e:
        raise SetupError("chdir", cfg["cwd"], e.errno)
    os.dup2(result, 3)  # after the last step that can fail: error_fd may be 3
    os.environ.clear()
    for key, value in cfg["env"]:
        os.environ[key] = value
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    # What a started run's workload shows: python3 runner.py.
    _set_cmdline([sys.orig_argv[0], "/opt/nsbox/runner.py"])
    _set_name(b"python3")
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    listener = _load_seccomp(cfg["seccomp"], cfg["notify"])
    if listener >= 0:
        _offer_listener(sock, listener)
        os.close(listener)
    # Everything else the zygote or nsbox handed down goes, the run socket
    # and the error fd with it: at end of file, setup is over.
    sock.detach()
    os.closerange(4, 1 << 20)
    sys.argv = ["/opt/nsbox/runner.py"]
    runner.main()  # never returns


def _serve_workload(cfg, fds):
    """In the workload, just forked by the run's PID 1 (forkinit.c), which
    has closed the report fd: becomes the runner. Never returns."""
    error_fd = fds[5]
    try:
        # What PID 1 set in the kernel, in Python's own table too.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cfg["seccomp"] = bytes.fromhex(cfg["seccomp"])
        _become_workload(cfg, fds, error_fd, socket.socket(fileno=fds[0]))
    except SetupError as e:
        _report_failure(error_fd, e.step, e.obj, e.err)
    except BaseException as e:  # a zygote bug: say it rather than hang the run
        _report_failure(error_fd, "workload", repr(e), 5)
    os._exit(SETUP_FAILED_EXIT)


def serve():
    # Children end on their own (their runs are nsbox's to supervise).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # What is loaded now is never collected: a run's garbage collections
    # then leave these objects' pages alone instead of copying them all.
    gc.collect()
    gc.freeze()
    # The workload is a copy of this one thread: another thread's state
    # (the GIL, its locks) would be copied half-way.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        sys.stderr.write("nsbox fork server: %d threads after the preloads; refusing to serve\n" % threads)
        return SETUP_FAILED_EXIT
    control = socket.socket(fileno=CONTROL_FD)
    control.set_inheritable(True)
    uid, gid = os.getuid(), os.getgid()  # what each run's user namespace maps
    sys.stdout.flush()
    sys.stderr.flush()
    # A profile's runs send the same settings each time (only the fds
    # differ): they are parsed once. Parsing anew made this process write to
    # about 90 more pages per run, each one a copy-on-write fault, as the
    # last fork shared them with its workload; and this loop is what every
    # run of the profile waits for, one at a time.
    last_message, cfg, run = None, None, None
    while True:
        try:
            message, fds, flags, _ = socket.recv_fds(control, MAX_REQUEST, FD_COUNT)
        except InterruptedError:
            continue
        if not message:
            # Every sender is gone (the profile was retired), but runs this
            # process forked may still be running in its pid namespace, which
            # ends with it: nsbox ends it once they are done.
            while True:
                signal.pause()
        if message[:1] != b"F" or len(fds) != FD_COUNT or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            for fd in fds:
                os.close(fd)
            sys.stderr.write("nsbox fork server: malformed request dropped\n")
            continue
        try:
            if message == last_message:
                run.fds[:] = fds
            else:
                last_message = None  # until cfg and run are both this message's
                cfg = json.loads(message[1:])
                run = _run_plan(cfg, fds, uid, gid)
                last_message = message
        except Exception as e:  # nsbox sent what this file does not read: fail the run, keep serving
            _report_failure(fds[5], "fork server", "request: " + repr(e), 22)
            for fd in fds:
                os.close(fd)
            continue
        try:
            pid = _fork_run(run)
        except OSError as e:
            _report_failure(fds[5], "clone", "run namespaces", e.errno)
            pid = -1
        if pid == 0:
            _serve_workload(cfg, fds)
        for fd in fds:
            os.close(fd)

if __name__ == "__main__":
    sys.exit(serve())
