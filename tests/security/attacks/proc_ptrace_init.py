"""Attach to PID 1 (nsbox's init) with ptrace."""
# denied: ptrace
def main(args):
    PTRACE_ATTACH = 16
    return refused("ptrace", PTRACE_ATTACH, 1, 0, 0)
