"""Write to /sys (kernel objects, firmware, uevent helpers)."""
def main(args):
    for path in ("/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/power/state"):
        try:
            with open(path, "w") as f:
                f.write("x")
            return escaped("wrote " + path)
        except OSError:
            pass
    return stopped("/sys is not writable")
