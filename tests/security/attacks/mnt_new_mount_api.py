"""Mount through the new API: fsopen/fsconfig/fsmount for a new tmpfs,
open_tree to clone a mount, fspick to reconfigure one, move_mount to attach,
mount_setattr to clear read-only."""
# denied: fsopen fsconfig fsmount open_tree fspick move_mount mount_setattr
def main(args):
    AT_FDCWD, OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH, AT_RECURSIVE = -100, 1, 4, 0x8000
    FSCONFIG_CMD_CREATE = 6
    attr = struct.pack("QQQQ", 0, 1, 0, 0)  # mount_attr: clear MOUNT_ATTR_RDONLY
    for name, a in (("fsopen", (b"tmpfs", 0)), ("fsconfig", (3, FSCONFIG_CMD_CREATE, None, None, 0)),
                    ("fsmount", (3, 0, 0)), ("open_tree", (AT_FDCWD, b"/", OPEN_TREE_CLONE)),
                    ("fspick", (AT_FDCWD, b"/", 0)),
                    ("move_mount", (AT_FDCWD, b"/tmp", AT_FDCWD, b"/usr", MOVE_MOUNT_F_EMPTY_PATH)),
                    ("mount_setattr", (AT_FDCWD, b"/", AT_RECURSIVE, attr, len(attr)))):
        r, e = syscall(name, *a)
        if r >= 0:
            return escaped(f"{name} returned {r}")
    return stopped("every call of the new mount API refused")
