"""Climb out of /proc/1/cwd with ../ to the host's files."""
def main(args):
    p = args.params
    for depth in range(1, 12):
        if reads_secret("/proc/1/cwd/" + "../" * depth + p["secret_path"].lstrip("/"), p["secret"]):
            return escaped(f"host secret read at depth {depth}")
    return stopped("no ../ chain from /proc/1/cwd reaches the host")
