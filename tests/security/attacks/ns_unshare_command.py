"""Use util-linux unshare(1) to become root in a new user namespace."""
# denied: unshare
def main(args):
    import subprocess
    try:
        r = subprocess.run(["unshare", "-Ur", "id", "-u"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return stopped("no unshare binary")
    if r.returncode == 0 and r.stdout.strip() == "0":
        return escaped("unshare -Ur gave uid 0")
    return stopped("unshare -Ur failed: " + r.stderr.strip()[:100])
