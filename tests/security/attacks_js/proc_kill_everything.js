// process.kill(-1, SIGKILL): every process we may signal. It must reach
// only this run's processes (our own child dies), never the host's, and
// signals to the harness's pid must find no such process.
// expect: no_process

// Alive and not yet a zombie (which kill(-1) made it and nobody reaped).
function isLiveProcess(pid) {
  try {
    return !/\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch (e) {
    return false;
  }
}

function main(args) {
  // The marker goes in argv[0]: sleep takes every other argument as a time.
  const child = childProcess.spawn('sleep', ['60'], { argv0: `${args.params.marker}-sleeper`, stdio: 'ignore' });
  if (!child.pid) return escaped('could not start a child to check kill(-1) on: the check would prove nothing');
  sleepMs(200);
  let hostPid;
  try {
    process.kill(args.params.host_pid, 0);
    hostPid = `process ${args.params.host_pid} exists here`;
  } catch (e) {
    hostPid = e.code;
  }
  process.kill(-1, 'SIGKILL');
  // A killed child needs CPU to die; in a throttled cgroup on a slow
  // (emulated) machine that can take a while, so poll, bounded.
  let childAlive = true;
  for (let waited = 0; childAlive && waited < 10000; waited += 50) {
    sleepMs(50);
    childAlive = isLiveProcess(child.pid);
  }
  if (childAlive) return escaped('kill(-1) did not reach our own child within 10 s: the check would prove nothing');
  if (hostPid !== 'ESRCH' && args.params.host_pid !== 1) return escaped(`kill(${args.params.host_pid}, 0): ${hostPid}`);
  // The harness's own process is what kill(-1) would have hit outside: it
  // checks it survived (it is running this test).
  return stopped(`our child died, we and PID 1 live; host pid: ${hostPid}`);
}
