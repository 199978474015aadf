"""Queue real-time signals to itself until host root, which the kernel
charges for every run's pending signals, has none left: root's programs
would then get EAGAIN from sigqueue and timer_create (about 96 000 on this
host, RLIMIT_SIGPENDING)."""
import signal
# nsbox's kRunPendingSignals, the run's RLIMIT_SIGPENDING.
LIMIT = 1024
class SigVal(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
def main(args):
    sig = signal.SIGRTMIN
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    queued = 0
    while queued < 200000 and _libc.sigqueue(os.getpid(), sig, SigVal(0)) == 0:
        queued += 1
    err = ctypes.get_errno()
    # What is pending stays so until the run ends: never unblocked.
    if err != errno.EAGAIN or not LIMIT - 16 <= queued <= LIMIT:
        return escaped(f"{queued} signals queued, then {errno.errorcode.get(err, err)} (limit {LIMIT})")
    # Signals queued to PID 1 count alike: its own limit must be as low.
    with open("/proc/1/limits") as f:
        init = [line.split()[3] for line in f if line.startswith("Max pending signals")]
    if init != [str(LIMIT)]:
        return escaped(f"PID 1 may have {init} signals pending")
    return stopped(f"EAGAIN after {queued} queued signals, this run's limit; PID 1's is {LIMIT} too")
