// Become root with what Node offers: setuid, seteuid, setgid, setegid,
// setgroups, initgroups.
function main(args) {
  const verdicts = [
    fails('setuid(0)', () => process.setuid(0)),
    fails('seteuid(0)', () => process.seteuid(0)),
    fails('setgid(0)', () => process.setgid(0)),
    fails('setegid(0)', () => process.setegid(0)),
    fails('setgroups([0])', () => process.setgroups([0])),
  ];
  if (process.getuid() === 0 || process.geteuid() === 0 || process.getgid() === 0 || process.getgroups().includes(0)) {
    return escaped(`now uid ${process.getuid()} euid ${process.geteuid()} gid ${process.getgid()} groups ${process.getgroups()}`);
  }
  if (!/^0+$/.test(statusField('CapEff')) || !/^0+$/.test(statusField('CapBnd'))) return escaped(`capabilities: ${confinement()}`);
  return allStopped(verdicts);
}
