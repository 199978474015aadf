"""Learn the host's name."""
def main(args):
    name = socket.gethostname()
    if name != "sandbox":
        return escaped("hostname " + name)
    try:
        with open("/proc/sys/kernel/hostname") as f:  # masked by default
            if f.read().strip() != "sandbox":
                return escaped("/proc/sys/kernel/hostname differs")
    except OSError:
        pass
    if os.uname().nodename != "sandbox":
        return escaped("uname nodename " + os.uname().nodename)
    return stopped("hostname is sandbox")
