"""Become traced (to inject code via a tracer child)."""
# denied: ptrace
def main(args):
    return refused("ptrace", 0, 0, 0, 0)
