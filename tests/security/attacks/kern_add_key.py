"""Add a key to a keyring."""
# denied: add_key
def main(args):
    return refused("add_key", b"user", b"nsbox", b"secret", 6, -3)
