"""Make POSIX message queues until host root, which the kernel charges for
every run's queue bytes, has none left (RLIMIT_MSGQUEUE, 800 KiB): root's
programs would then get EMFILE from mq_open."""
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("reserved", ctypes.c_long * 4)]
def main(args):
    attr = MqAttr(0, 10, 8192, 0)  # about 80 KiB each
    made = 0
    while made < 100:
        fd = _libc.mq_open(b"/nsbox-attack-%d" % made, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
        if fd < 0:
            break
        made += 1
    err = ctypes.get_errno()
    # The run's RLIMIT_MSGQUEUE is 0: not even the first.
    if made == 0 and err == errno.EMFILE:
        return stopped("EMFILE at the first queue: this run may hold no queue bytes")
    return escaped(f"{made} queues of 80 KiB, then {errno.errorcode.get(err, err)}")
