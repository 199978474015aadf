"""Read a host file through /proc/1/root (PID 1's root directory)."""
def main(args):
    p = args.params
    if reads_secret("/proc/1/root" + p["secret_path"], p["secret"]):
        return escaped("host secret read through /proc/1/root")
    return stopped("/proc/1/root is the sandbox's own root")
