"""Get raw I/O port access (iopl/ioperm)."""
# denied: iopl ioperm
def main(args):
    a = refused("iopl", 3)
    if not a["stopped"]:
        return a
    return refused("ioperm", 0x80, 1, 1)
