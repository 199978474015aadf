"""Find a setuid or setgid binary to gain privileges."""
# timeout: 300
def main(args):
    import stat
    found = []
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
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
