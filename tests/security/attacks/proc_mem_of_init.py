"""Read or write PID 1 through /proc/1/mem."""
def main(args):
    return fails("open /proc/1/mem", os.open, "/proc/1/mem", os.O_RDWR)
