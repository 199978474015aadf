"""Ask the kernel to upcall for a key."""
# denied: request_key
def main(args):
    return refused("request_key", b"user", b"nsbox", None, -3)
