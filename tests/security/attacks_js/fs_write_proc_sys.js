// Change the host kernel through /proc: core_pattern (runs a program as
// host root), sysrq, the hostname, overcommit.
// Masked means /dev/null (1:3) bound over it: writes go nowhere.
function maskedByDevNull(path) {
  try {
    const st = fs.statSync(path);
    return st.isCharacterDevice() && st.rdev === ((1 << 8) | 3);
  } catch (e) {
    return false;
  }
}

function main(args) {
  return allStopped([
    fails('write /proc/sys/kernel/core_pattern', () => fs.writeFileSync('/proc/sys/kernel/core_pattern', '|/tmp/x')),
    maskedByDevNull('/proc/sysrq-trigger')
      ? stopped('/proc/sysrq-trigger: masked by /dev/null')
      : fails('write /proc/sysrq-trigger', () => fs.writeFileSync('/proc/sysrq-trigger', 'h')),
    fails('write /proc/sys/kernel/hostname', () => fs.writeFileSync('/proc/sys/kernel/hostname', 'owned')),
    fails('write /proc/sys/vm/overcommit_memory', () => fs.writeFileSync('/proc/sys/vm/overcommit_memory', '1')),
    fails('write /proc/self/oom_score_adj -1000', () => fs.writeFileSync('/proc/self/oom_score_adj', '-1000')),
  ]);
}
