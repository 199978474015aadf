"""Change the host's device nodes (bound into /dev) through their inodes."""
# Their timestamps and modes are the host's: a run that could set them
# would change host files and signal other sandboxes through them.
def main(args):
    changed = []
    for name in ("null", "zero", "full", "random", "urandom"):
        path = "/dev/" + name
        # "Now" needs only write permission, which every one of them
        # grants to all: only a read-only mount stops it.
        try:
            os.utime(path)
            changed.append("utime " + path)
        except OSError as e:
            if e.errno != errno.EROFS:
                return escaped(f"utime {path}: unexpected {errno.errorcode.get(e.errno, e.errno)}")
        try:
            os.chmod(path, 0o600)
            changed.append("chmod " + path)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EPERM, errno.EACCES):
                return escaped(f"chmod {path}: unexpected {errno.errorcode.get(e.errno, e.errno)}")
    if changed:
        return escaped("changed host device nodes: " + ", ".join(changed))
    with open("/dev/null", "w") as null:
        null.write("still usable")
    return stopped("device nodes read-only; /dev/null still takes writes")
