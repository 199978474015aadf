"""pivot_root back to the old root."""
# denied: pivot_root
def main(args):
    return refused("pivot_root", b"/tmp", b"/tmp")
