// Learn how long the host has been up (which kernel fixes it cannot have
// yet) from what counts from its boot: process.hrtime and
// performance.timeOrigin's clock (CLOCK_MONOTONIC), os.uptime() and
// /proc/uptime, /proc/stat's btime. The run's own time namespace makes them
// count from about the run's start.
function main(args) {
  const hostBoot = args.params.host_boot_time; // wall-clock seconds, from the host's /proc/stat
  const hostUp = Date.now() / 1000 - hostBoot;
  const btime = Number(/^btime (\d+)$/m.exec(fs.readFileSync('/proc/stat', 'utf8'))[1]);
  if (btime <= hostBoot + 1) return escaped(`/proc/stat says the machine booted at ${btime}: the host's boot (${hostBoot})`);
  const readings = {
    '/proc/uptime': Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]),
    'os.uptime()': require('os').uptime(),
    'process.hrtime': Number(process.hrtime.bigint() / 1000000n) / 1000,
  };
  for (const [name, value] of Object.entries(readings)) {
    if (!(value >= 0 && value < hostUp - 1)) return escaped(`${name} reads ${Math.round(value)} s; the host has been up ${Math.round(hostUp)} s`);
  }
  return stopped(`uptime ${readings['/proc/uptime']} s, booted at ${btime}; the host has been up ${Math.round(hostUp)} s`);
}
