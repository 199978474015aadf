"""Keep any capability (effective, permitted, bounding, ambient)."""
def main(args):
    with open("/proc/self/status") as f:
        status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    caps = {k: int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    if any(caps.values()):
        return escaped("capabilities left: " + str(caps))
    if status.get("NoNewPrivs", "").strip() != "1" or status.get("Seccomp", "").strip() != "2":
        return escaped("no_new_privs or seccomp missing: " + status.get("NoNewPrivs", "") + " " + status.get("Seccomp", ""))
    if os.getuid() == 0 or os.geteuid() == 0:
        return escaped("running as uid 0")
    return stopped("no capabilities, no_new_privs, seccomp filter, uid " + str(os.getuid()))
