"""Learn how long the host has been up, and so which kernel fixes it cannot
have yet: from the clocks that count from its boot (CLOCK_BOOTTIME,
CLOCK_MONOTONIC), /proc/uptime, /proc/stat's btime and process start times.
In the run's own time namespace they all count from about the run's start.
(/proc/stat's per-CPU counters still grow from the host's boot:
docs/SECURITY.md.)"""
def main(args):
    host_boot = args.params["host_boot_time"]  # wall-clock seconds, from the host's /proc/stat
    host_up = time.time() - host_boot
    with open("/proc/stat") as f:
        btime = int(next(line for line in f if line.startswith("btime ")).split()[1])
    if btime <= host_boot + 1:
        return escaped(f"/proc/stat says the machine booted at {btime}: the host's boot ({host_boot})")
    with open("/proc/1/stat") as f:
        pid1_start = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    for name, value in (("/proc/uptime", uptime),
                        ("CLOCK_BOOTTIME", time.clock_gettime(time.CLOCK_BOOTTIME)),
                        ("CLOCK_MONOTONIC", time.monotonic()),
                        ("PID 1's start time", pid1_start)):
        if not 0 <= value < host_up - 1:
            return escaped(f"{name} reads {value:.0f} s; the host has been up {host_up:.0f} s")
    return stopped(f"uptime {uptime:.1f} s, booted at {btime}; the host has been up {host_up:.0f} s")
