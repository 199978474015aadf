"""Make the supervisor copy a host file out as an artifact through a symlink."""
def main(args):
    p = args.params
    try:
        os.makedirs("/workspace/out", exist_ok=True)
        os.symlink(p["secret_path"], "/workspace/out/leak")
        os.symlink("/proc/1/root" + p["secret_path"], "/workspace/out/leak2")
    except OSError as e:
        return escaped("cannot plant symlinks, the check would prove nothing: " + str(e))
    return stopped("symlinks planted; the harness checks no artifact holds the secret")
