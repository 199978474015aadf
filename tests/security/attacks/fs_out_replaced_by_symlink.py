"""Replace /workspace/out, the directory the supervisor copies artifacts
from, with a symlink to the host secret's directory: the path means nothing
inside the sandbox, but a supervisor that followed it would resolve it on
the host."""
def main(args):
    secret_dir = os.path.dirname(args.params["secret_path"])
    try:
        if os.path.isdir("/workspace/out"):
            os.rename("/workspace/out", "/workspace/out.orig")
        os.symlink(secret_dir, "/workspace/out")
    except OSError as e:
        return escaped(f"could not even plant the symlink: {e}")  # the workspace must be writable
    return stopped("out replaced by a symlink; the harness checks no artifact holds the secret")
