"""The classic chroot escape: chroot into a subdirectory, then chdir .. past it."""
# denied: chroot
def main(args):
    os.makedirs("/tmp/jail", exist_ok=True)
    try:
        os.chroot("/tmp/jail")
    except OSError as e:
        return stopped("chroot refused: " + e.strerror)
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    return escaped("chroot allowed")
