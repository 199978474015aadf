"""Remount / read-write."""
# denied: mount
def main(args):
    MS_REMOUNT, MS_BIND = 32, 4096
    return refused("mount", b"none", b"/", None, MS_REMOUNT | MS_BIND, None)
