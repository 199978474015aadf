"""clone3() whose flags seccomp cannot inspect."""
def main(args):
    return refused("clone3", 0, 0, errnos=(errno.ENOSYS,))
