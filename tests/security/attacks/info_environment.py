"""Read the caller's environment (tokens, keys)."""
def main(args):
    secret = args.params["secret"]
    for k, v in os.environ.items():
        if secret in v or k.startswith("NSBOX_SECRET"):
            return escaped("host environment leaked: " + k)
    # Other processes' environments, and PID 1's command line (a copy of the
    # supervisor's memory); our own argv carries the harness's params.
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for what in ("environ", "cmdline") if pid == "1" else ("environ",):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if secret.encode() in data or b"NSBOX_SECRET" in data:
                return escaped(f"/proc/{pid}/{what} holds the host's environment")
    return stopped("environment is nsbox's own: " + ", ".join(sorted(os.environ))[:200])
