// Change the host kernel through /proc: core_pattern (runs a program as
// host root), sysrq, the hostname, overcommit.
function main(args) {
  return allStopped([
    fails('write /proc/sys/kernel/core_pattern', () => fs.writeFileSync('/proc/sys/kernel/core_pattern', '|/tmp/x')),
    fails('write /proc/sysrq-trigger', () => fs.writeFileSync('/proc/sysrq-trigger', 'h')),
    fails('write /proc/sys/kernel/hostname', () => fs.writeFileSync('/proc/sys/kernel/hostname', 'owned')),
    fails('write /proc/sys/vm/overcommit_memory', () => fs.writeFileSync('/proc/sys/vm/overcommit_memory', '1')),
    fails('write /proc/self/oom_score_adj -1000', () => fs.writeFileSync('/proc/self/oom_score_adj', '-1000')),
  ]);
}
