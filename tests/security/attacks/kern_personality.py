"""Turn on READ_IMPLIES_EXEC or disable ASLR through personality()."""
# denied: personality
def main(args):
    READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE = 0x0400000, 0x0040000
    for flag in (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE):
        r, e = syscall("personality", flag)
        if not (r == -1 and e == errno.EPERM):
            return escaped(f"personality({flag:#x}) returned {r}")
    return stopped("personality changes refused")
