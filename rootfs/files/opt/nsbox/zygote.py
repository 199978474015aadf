"""nsbox Python fork server (docs/ARCHITECTURE.md, "Fork server").

Runs as the workload of its own sandbox (its own user, mount, pid, net, ipc
and uts namespaces and cgroup, no capabilities, no_new_privs, a seccomp
filter), with the runner and json already imported. It never runs user code
itself. For each request on fd 3 it forks the run's PID 1 straight into
fresh namespaces of its own, before any user code exists:

  zygote -> init (PID 1 of the run), cloned into a new pid namespace and a
            new user namespace nested in the zygote's: says its pid
            (SCM_CREDENTIALS) and waits while nsbox moves it into the run's
            cgroup; maps the same single uid and gid as the zygote's;
            unshares new mount, net, ipc, uts and cgroup namespaces (made in
            the run's cgroup, the cgroup namespace rooted at it); fresh
            /proc with its masks, fresh /tmp, /dev/shm,
            /dev/pts, workspace and profile tmpfs, lo up, hostname; hands
            nsbox a pidfd of itself; rlimits; drops every capability;
            no_new_privs; then only reaps, and exits when nsbox hangs up
            the run socket;
         -> workload (PID 2): stdio and fd 3 from the request, cwd, env,
            the run's seccomp filter last (its listener goes to nsbox), then
            the runner, exactly as `python3 runner.py` would run it.

The request is one SOCK_SEQPACKET message from nsbox: b"F" and the run's
settings as JSON, with the fds [run socket, stdin, stdout, stderr, result,
error, report]. Setup failures go to the error fd as nsbox's ChildFailure
(step, object, errno); init reports the workload's end on the report fd as
nsbox's InitReport. Both layouts are in include/nsbox/child_report.h.
"""
import ctypes
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

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# PID 1 is cloned into the namespaces it cannot enter later; it makes the
# others once it is in the run's cgroup, so that their memory is the run's
# (and the cgroup namespace is rooted where its creator is).
CLONE_NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID
UNSHARED_NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
NO_DEV_SUID = MS_NOSUID | MS_NODEV

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE and
# their locks: what nsbox's own child sets (caps.cc).
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
SYS_CLONE, SYS_CAPSET, SYS_SECCOMP = 56, 126, 317
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 8
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
WALL = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long
# Calls through PyDLL keep the GIL held, as os.fork() does around fork().
_libc_gil = ctypes.PyDLL(None, use_errno=True)
_libc_gil.syscall.restype = ctypes.c_long
_libc_gil.syscall.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p]


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


def _mount(source, target, fstype, flags, data=None, optional=False):
    """True when mounted; False for an optional target that does not exist."""
    ret = _libc.mount(source.encode() if source else None, target.encode(),
                      fstype.encode() if fstype else None, flags, data.encode() if data else None)
    if ret < 0:
        err = ctypes.get_errno()
        if optional and err == 2:  # ENOENT: a mask of a missing path is a no-op
            return False
        raise SetupError("mount " + (fstype or "bind"), target, err)
    return True


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


def _write_file(path, text):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise SetupError("write", path, e.errno)


def _report_failure(error_fd, step, obj, err):
    try:
        os.write(error_fd, struct.pack("48s4000si", step.encode()[:47], obj.encode()[:3999], err))
    except OSError:
        pass


def _fork_into_run_namespaces():
    """os.fork(), except that the child is born in the run's new pid
    namespace and a new user namespace nested in the zygote's: it is the
    run's PID 1, with no process in between. Python's own before- and
    after-fork steps run around the clone as os.fork() runs them. Returns
    the child's pid in the parent and 0 in the child.

    glibc's own fork steps do not run: no pthread_atfork handlers, no
    malloc or stdio lock reset, no robust futex list, and glibc's cached
    thread id keeps the fork server's value (used by pthread_setaffinity_np,
    pthread_setschedparam and the like on the calling thread). That is sound
    only in a process with a single thread that loaded no library with fork
    handlers, which serve() checks once its preloads are done. Only PID 1's
    own code runs in the child; the workload is forked by os.fork(), which
    runs glibc's steps."""
    ctypes.pythonapi.PyOS_BeforeFork()
    try:
        pid = _libc_gil.syscall(SYS_CLONE, CLONE_NAMESPACES | signal.SIGCHLD, None, None, None, None)
    except BaseException:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        raise
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, os.strerror(err))
    return pid


def _enter_run_namespaces(uid, gid):
    """Maps the zygote's single uid and gid (the sandbox's own) in the run's
    user namespace, then makes the run's mount, net, ipc, uts and cgroup
    namespaces, owned by it. This process is in the run's cgroup by now: the
    namespaces' memory is charged to the run, and the cgroup namespace is
    rooted at the run's cgroup."""
    _write_file("/proc/self/setgroups", "deny")
    _write_file("/proc/self/uid_map", "%d %d 1" % (uid, uid))
    _write_file("/proc/self/gid_map", "%d %d 1" % (gid, gid))
    _check(_libc.unshare(UNSHARED_NAMESPACES), "unshare", "run namespaces")


def _build_mounts(cfg):
    """What one run may write or see of other runs is made fresh for it; the
    rest (rootfs, binds, masks outside /proc) comes from the zygote's mount
    namespace, locked: this user namespace cannot unmount or change it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", NO_DEV_SUID | MS_NOEXEC)
    for path in cfg["proc_mask_files"]:
        if _mount("/dev/null", path, None, MS_BIND, optional=True):
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    for path in cfg["proc_mask_dirs"]:
        _mount("tmpfs", path, "tmpfs", MS_RDONLY | NO_DEV_SUID | MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1",
               optional=True)
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    for t in cfg["tmpfs"]:
        _mount("tmpfs", t["target"], "tmpfs", t["flags"], t["data"])
    ws = cfg.get("workspace")
    if ws:
        _mount("tmpfs", ws["path"], "tmpfs", NO_DEV_SUID, "mode=0700,size=%d" % ws["size"])
        try:
            os.mkdir(ws["path"] + "/out", 0o755)
        except OSError as e:
            raise SetupError("mkdir", ws["path"] + "/out", e.errno)


def _bring_up_loopback():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as e:
        raise SetupError("bring up", "lo", e.errno)
    try:
        import fcntl

        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
    except OSError as e:
        raise SetupError("bring up", "lo", e.errno)
    finally:
        s.close()


def _drop_privileges():
    """What nsbox's own child does: empty bounding and ambient sets, locked
    securebits, no capability left, no_new_privs."""
    _check(_libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "lock securebits", "run init")
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != 22:  # EINVAL: past the last
            raise SetupError("drop bounding capability", "run init", ctypes.get_errno())
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities", "run init")
    header = struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two empty __user_cap_data_struct
    _check(_libc.syscall(SYS_CAPSET, ctypes.c_char_p(header), ctypes.c_char_p(data)), "clear capabilities",
           "run init")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl", "PR_SET_NO_NEW_PRIVS")


def _load_seccomp(program, notify):
    """The run's filter, stacked on the zygote's: returns the listener fd
    (denied calls go to nsbox, which answers EPERM and counts them) or -1."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER if notify else 0
    fd = _check(_libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog)), "seccomp",
                "load filter")
    return fd if notify else -1


def _apply_rlimits(limits):
    import resource

    for res, soft, hard in limits:
        try:
            resource.setrlimit(res, (soft, hard))
        except (OSError, ValueError) as e:
            raise SetupError("setrlimit", str(res), getattr(e, "errno", None) or 22)


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
        try:
            socket.send_fds(sock, [b"L"], [listener])
        except OSError as e:
            raise SetupError("sendmsg", "seccomp listener", e.errno)
        os.close(listener)
    # Everything else the zygote or nsbox handed down goes, the run socket
    # and the error fd with it: at end of file, setup is over.
    sock.detach()
    os.closerange(4, 1 << 20)
    sys.argv = ["/opt/nsbox/runner.py"]
    runner.main()  # never returns


def _run_init(cfg, fds):
    """PID 1 of the run: builds its view, forks the workload, reaps, reports."""
    run_sock, error_fd, report_fd = fds[0], fds[5], fds[6]
    # PID 1 of a started run is nsbox-init, and shows nothing else.
    _set_cmdline(["nsbox-init"])
    _set_name(b"nsbox-init")
    _build_mounts(cfg)
    _bring_up_loopback()
    try:
        socket.sethostname(cfg["hostname"])
    except OSError as e:
        raise SetupError("sethostname", cfg["hostname"], e.errno)
    sock = socket.socket(fileno=run_sock)
    # nsbox learns this process's pid from the credentials, and gets a pidfd
    # of it: a pid alone could be reused once the process is gone.
    me = os.pidfd_open(os.getpid())
    socket.send_fds(sock, [b"I"], [me])
    os.close(me)
    _apply_rlimits(cfg["rlimits"])
    _drop_privileges()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    workload = os.fork()
    if workload == 0:
        try:
            os.close(report_fd)
            _become_workload(cfg, fds, error_fd, sock)
        except SetupError as e:
            _report_failure(error_fd, e.step, e.obj, e.err)
        except BaseException as e:  # a zygote bug: say it rather than hang the run
            _report_failure(error_fd, "workload", repr(e), 5)
        os._exit(SETUP_FAILED_EXIT)
    for fd in fds[1:6]:
        os.close(fd)
    # Nothing of the fork server's stays open here (its stdout and stderr).
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _reap_until_workload_ends(workload, report_fd, sock)


def _reap_until_workload_ends(workload, report_fd, sock):
    """Reaps every child until the workload ends, then reports it. The run
    socket stays open on nsbox's side for the whole run: its end means nsbox
    is gone, and PID 1 exits, which ends every process of the run (a started
    run's PID 1 dies with the supervisor the same way, PR_SET_PDEATHSIG)."""
    import select

    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
    while True:
        status = _reap_exited(workload)
        if status is not None:
            break
        ready, _, _ = select.select([sock, wake_read], [], [])
        if sock in ready and not sock.recv(1):
            os._exit(SETUP_FAILED_EXIT)
        if wake_read in ready:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
    _report_workload_end(status, report_fd)


def _reap_exited(workload):
    """Reaps every exited child; the workload's wait status once it is one."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG | WALL)
        except ChildProcessError:
            os._exit(SETUP_FAILED_EXIT)  # the workload was never seen to end
        if pid == 0:
            return None
        if pid == workload:
            return status


def _report_workload_end(status, report_fd):
    """nsbox's InitReport (kind, value, alone), then PID 1 exits: the kernel
    ends whatever is left of the run."""
    alone = 1
    while True:  # reap the exited orphans; alone when none is left
        try:
            if os.waitpid(-1, os.WNOHANG | WALL)[0] == 0:
                alone = 0
                break
        except ChildProcessError:
            break
    if os.WIFSIGNALED(status):
        kind, value = 2, os.WTERMSIG(status)
    else:
        kind, value = 1, os.waitstatus_to_exitcode(status)
    os.write(report_fd, struct.pack("iii", kind, value, alone))
    os._exit(value if kind == 1 else 128 + value)


def _serve_one(message, fds, uid, gid):
    """In the run's PID 1, just cloned: the whole setup of the run. Never
    returns."""
    error_fd = fds[5]
    try:
        # nsbox moves this process into the run's cgroup; the pidfd lets it
        # check the pid still names this process when it does. Until then
        # the memory it touches is charged to the fork server's cgroup for
        # as long as the run lives, so it does nothing else first.
        sock = socket.socket(fileno=fds[0])
        me = os.pidfd_open(os.getpid())
        socket.send_fds(sock, [b"P"], [me])
        os.close(me)
        if sock.recv(1) != b"c":
            os._exit(SETUP_FAILED_EXIT)
        sock.detach()
        os.close(CONTROL_FD)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cfg = json.loads(message[1:])
        cfg["seccomp"] = bytes.fromhex(cfg["seccomp"])
        _enter_run_namespaces(uid, gid)
        _run_init(cfg, fds)
    except SetupError as e:
        _report_failure(error_fd, e.step, e.obj, e.err)
    except BaseException as e:
        _report_failure(error_fd, "fork server", repr(e), 5)
    os._exit(SETUP_FAILED_EXIT)


def serve():
    # Children end on their own (their runs are nsbox's to supervise).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # What is loaded now is never collected: a run's garbage collections
    # then leave these objects' pages alone instead of copying them all.
    gc.collect()
    gc.freeze()
    # _fork_into_run_namespaces() is sound only in a single-threaded process.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        sys.stderr.write("nsbox fork server: %d threads after the preloads; refusing to serve\n" % threads)
        return SETUP_FAILED_EXIT
    control = socket.socket(fileno=CONTROL_FD)
    control.set_inheritable(True)
    uid, gid = os.getuid(), os.getgid()  # what each run's user namespace maps
    sys.stdout.flush()
    sys.stderr.flush()
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
        if message[:1] != b"F" or len(fds) != FD_COUNT or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            sys.stderr.write("nsbox fork server: malformed request dropped\n")
            continue
        try:
            pid = _fork_into_run_namespaces()
        except OSError as e:
            _report_failure(fds[5], "clone", "run namespaces", e.errno)
            pid = -1
        if pid == 0:
            _serve_one(message, fds, uid, gid)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    sys.exit(serve())
