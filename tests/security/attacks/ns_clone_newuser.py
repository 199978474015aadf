"""clone() with CLONE_NEWUSER instead of unshare."""
# denied: clone
def main(args):
    CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
    r, e = syscall("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        return escaped("clone(CLONE_NEWUSER) created a child")
    return stopped(f"clone(CLONE_NEWUSER): {errno.errorcode.get(e, e)}")
