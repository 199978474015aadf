"""Call through the i386 ABI (int 0x80), where a deny list keyed on x86_64
numbers would not match: machine code in an executable page."""
# expect: killed
# needs: i386
import mmap


def main(args):
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (i386 getpid); int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    r = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    return escaped(f"i386 getpid returned {r}")
