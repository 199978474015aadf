"""List the host's processes in /proc."""
def main(args):
    pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for pid in pids:
        if pid == os.getpid():
            continue  # our own argv is the attack itself
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        # PID 1 is a copy of the supervisor: it must not show the supervisor's argv.
        if pid == 1 and cmd.rstrip(b"\0") != b"nsbox-init":
            return escaped(f"PID 1 shows a command line: {cmd[:80]!r}")
        if any(m in cmd for m in (b"nsbox_security_tests", b"nsbox serve", b"/tmp/nsboxtest", b"systemd", b"--json")):
            return escaped(f"host process visible: {pid} {cmd[:80]!r}")
    if 1 not in pids or max(pids) > 1000:
        return escaped(f"not a fresh pid namespace: {sorted(pids)[:10]}")
    return stopped(f"{len(pids)} processes, all the sandbox's own")
