"""Read and write PID 1's memory with process_vm_readv/writev."""
# denied: process_vm_readv process_vm_writev
def main(args):
    buf = ctypes.create_string_buffer(64)
    local = struct.pack("QQ", ctypes.addressof(buf), 64)
    remote = struct.pack("QQ", 0x400000, 64)
    for name in ("process_vm_readv", "process_vm_writev"):
        verdict = refused(name, 1, local, 1, remote, 1, 0, errnos=(errno.EPERM, errno.ESRCH))
        if not verdict["stopped"]:
            return verdict
    return stopped("process_vm_readv and process_vm_writev refused")
