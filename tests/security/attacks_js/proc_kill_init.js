// Kill or stop PID 1 (nsbox's init) to orphan the workload, with the
// signals it cannot catch (others it forwards to the workload, which ends
// the run: that is no escape).
function main(args) {
  let comm;
  try {
    comm = fs.readFileSync('/proc/1/comm', 'utf8').trim();
  } catch (e) {
    return escaped(`precondition: /proc/1/comm unreadable: ${e.code}`);
  }
  if (comm !== 'nsbox-init' || process.pid === 1)
    return escaped(`precondition: PID 1 is ${comm} and this is pid ${process.pid}, not a workload under nsbox's init`);
  const tried = [];
  for (const sig of ['SIGKILL', 'SIGSTOP']) {
    try {
      process.kill(1, sig);
      tried.push(`${sig} sent`);
    } catch (e) {
      tried.push(`${sig}: ${e.code}`);
    }
  }
  sleepMs(300);
  let state;
  try {
    state = fs.readFileSync('/proc/1/stat', 'utf8').split(') ')[1][0];
  } catch (e) {
    return escaped(`PID 1 is gone (${tried.join(', ')})`);
  }
  if (process.ppid !== 1 && process.ppid !== 0) return escaped(`reparented to ${process.ppid}`);
  if (state === 'T' || state === 'Z' || state === 'X') return escaped(`PID 1 is in state ${state}`);
  return stopped(`PID 1 (${comm}) still runs (state ${state}): ${tried.join(', ')}`);
}
