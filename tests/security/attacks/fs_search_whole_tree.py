"""Search every readable file of the sandbox for the host's secret."""
# timeout: 300
def main(args):
    secret = args.params["secret"].encode()
    checked = 0
    for root, dirs, files in os.walk("/", onerror=None):
        if root.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.getsize(path) > (1 << 20) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    checked += 1
                    if secret in f.read():
                        return escaped("host secret found at " + path)
            except OSError:
                pass
    return stopped(f"secret in none of {checked} files")
