// Raise our own limits or leave our cgroup: cgroupfs (v1 and v2 names),
// and /sys, where the host's devices and kernel knobs live.
function main(args) {
  const verdicts = [];
  for (const path of ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/pids.max', '/sys/fs/cgroup/cgroup.procs',
    '/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/unified/cgroup.procs',
    '/sys/kernel/uevent_helper', '/sys/power/state']) {
    verdicts.push(fails('write ' + path, () => fs.writeFileSync(path, 'max')));
  }
  let sys = [];
  try {
    sys = fs.readdirSync('/sys');
  } catch (e) {
    /* no /sys at all */
  }
  if (sys.length) return escaped('/sys is mounted: ' + sys.join(','));
  return allStopped(verdicts);
}
