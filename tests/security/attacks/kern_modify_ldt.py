"""Read and write the process's local descriptor table: segment descriptors,
a source of kernel bugs (and of 16-bit code tricks) no runtime needs."""
# denied: modify_ldt
def main(args):
    buf = ctypes.create_string_buffer(16)  # struct user_desc, all zero: an empty entry 0
    for func in (0, 1):  # read, write
        r, e = syscall("modify_ldt", func, buf, 16)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"modify_ldt({func}) returned {r} (errno {e})")
    return stopped("modify_ldt refused with EPERM")
