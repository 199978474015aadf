"""Set up io_uring, whose operations bypass seccomp."""
def main(args):
    params = ctypes.create_string_buffer(120)
    return refused("io_uring_setup", 8, params, errnos=(errno.ENOSYS,))
