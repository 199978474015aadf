"""Create a userfaultfd (used to win kernel race conditions)."""
# denied: userfaultfd
def main(args):
    return refused("userfaultfd", 0)
