"""Create a userfaultfd (used to win kernel race conditions)."""
def main(args):
    return refused("userfaultfd", 0)
