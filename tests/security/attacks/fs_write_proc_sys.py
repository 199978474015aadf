"""Change kernel settings through /proc/sys."""
def main(args):
    for path in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches"):
        try:
            with open(path, "w") as f:
                f.write("x")
            return escaped("wrote " + path)
        except OSError:
            pass
    return stopped("/proc/sys is not writable")
