"""Search every filesystem mounted in the sandbox (besides the rootfs) for the host's secret."""
def main(args):
    secret = args.params["secret"].encode()
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    checked = 0
    for point in points:
        if point == "/" or point.startswith(("/proc", "/sys", "/dev")):
            continue
        for root, dirs, files in os.walk(point):
            for name in files:
                path = os.path.join(root, name)
                try:
                    if not os.path.isfile(path) or os.path.getsize(path) > (1 << 20):
                        continue
                    with open(path, "rb") as f:
                        checked += 1
                        if secret in f.read():
                            return escaped("host secret found at " + path)
                except OSError:
                    pass
    return stopped(f"secret in none of {checked} files under {len(points)} mounts")
