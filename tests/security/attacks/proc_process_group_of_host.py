"""Reach other sandboxes and the supervisor through a shared process group."""
# A process group or session whose leader is outside this pid namespace
# shows as 0 here; kill(0, sig) and setpriority(PRIO_PGRP, 0, n) would then
# reach every member of it, in any namespace: other runs, the fork server,
# the node's warm sandboxes. Its controlling terminal would be the
# operator's.
def main(args):
    group, session = os.getpgrp(), os.getsid(0)
    if group == 0 or session == 0:
        return escaped(f"process group {group}, session {session}: led from outside the sandbox")
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        if e.errno not in (errno.ENXIO, errno.ENOENT):
            return escaped(f"/dev/tty: unexpected {errno.errorcode.get(e.errno, e.errno)}")
    else:
        os.close(fd)
        return escaped("/dev/tty opened: the sandbox has a controlling terminal")
    return stopped(f"process group {group} and session {session} are the sandbox's own; no terminal")
