"""Use the kernel keyring (shared across containers on many kernels)."""
# denied: keyctl
def main(args):
    KEYCTL_GET_KEYRING_ID = 0
    return refused("keyctl", KEYCTL_GET_KEYRING_ID, -3, 0)
