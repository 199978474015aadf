"""Find a setuid or setgid binary to gain privileges."""
import stat

# Where setuid helpers live (a walk of the whole tree is too slow for the VM
# rig; tools/build-rootfs refuses any setuid file in the tree anyway).
TOPS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/libexec", "/usr/lib/dbus-1.0",
        "/usr/lib/openssh", "/usr/lib/polkit-1", "/opt", "/tmp")


def main(args):
    found = []
    for top in TOPS:
        for root, dirs, files in os.walk(top):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    found.append(os.path.join(root, name))
    if found:
        return escaped("setuid/setgid files: " + ", ".join(found[:5]))
    return stopped("no setuid or setgid file")
