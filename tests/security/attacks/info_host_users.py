"""Read the host's users and password hashes."""
def main(args):
    try:
        with open("/etc/shadow") as f:
            return escaped("read /etc/shadow")
    except OSError:
        pass
    with open("/etc/passwd") as f:
        users = [l.split(":")[0] for l in f]
    if len(users) > 40:
        return escaped(f"{len(users)} users: the host's passwd?")
    return stopped("rootfs passwd: " + ", ".join(users))
