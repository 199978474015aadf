"""Create a nested user namespace (the door to most kernel escalations)."""
# denied: unshare
def main(args):
    CLONE_NEWUSER = 0x10000000
    return refused("unshare", CLONE_NEWUSER)
