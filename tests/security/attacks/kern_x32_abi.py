"""Call through the x32 ABI, where a deny list keyed on x86_64 numbers would not match."""
# expect: killed
def main(args):
    __X32_SYSCALL_BIT = 0x40000000
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(__X32_SYSCALL_BIT | 39))  # getpid
    return escaped(f"x32 syscall returned {r} (errno {ctypes.get_errno()})")
