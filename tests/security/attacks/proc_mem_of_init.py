"""Read or write PID 1 through /proc/1/mem: the ptrace access check must
refuse it (EACCES), not a missing file."""
def main(args):
    return fails("open /proc/1/mem", os.open, "/proc/1/mem", os.O_RDWR, errnos=(errno.EACCES,))
