"""Become uid 0 with setuid/setresuid."""
def main(args):
    for fn, a in ((os.setuid, (0,)), (os.setresuid, (0, 0, 0)), (os.setgid, (0,)), (os.setgroups, ([0],))):
        try:
            fn(*a)
            return escaped(f"{fn.__name__}{a} succeeded")
        except OSError:
            pass
    return stopped("uid/gid changes refused")
