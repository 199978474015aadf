"""Read PID 1's memory with process_vm_readv."""
# denied: process_vm_readv
def main(args):
    buf = ctypes.create_string_buffer(64)
    local = struct.pack("QQ", ctypes.addressof(buf), 64)
    remote = struct.pack("QQ", 0x400000, 64)
    return refused("process_vm_readv", 1, local, 1, remote, 1, 0, errnos=(errno.EPERM, errno.ESRCH))
