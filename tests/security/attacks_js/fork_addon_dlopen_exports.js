// process.dlopen the add-on into a module of our own and call every export
// it has, with arguments an attacker would pick (the zygote's control fd, a
// plan mounting proc over /), then look for any sign of the fork server.
// denied: clone mount unshare
function main(args) {
  const m = { exports: {} };
  process.dlopen(m, FORKINIT);
  const f = m.exports;
  const names = Object.keys(f).sort();
  const log = [];
  const call = (name, fn) => {
    try {
      log.push(`${name}=${JSON.stringify(fn())}`);
    } catch (e) {
      log.push(`${name}!${e.code || e.errno || e.message}`);
    }
  };
  call('ignoreChildren', () => f.ignoreChildren());
  call('recordZygoteFds', () => f.recordZygoteFds());
  call('pipe', () => f.pipe());
  call('fillRandom', () => { const b = Buffer.alloc(16); f.fillRandom(b); return b.some((x) => x !== 0); });
  call('receive', () => f.receive(3));
  call('codeOnHugePages', () => f.codeOnHugePages());
  call('platformWithoutWorkers', () => f.platformWithoutWorkers());
  const plan = { fds: [3, 3, 3, 3, 3, 3, 3], controlFd: 3, uid: 0, gid: 0,
    mounts: [['proc', '/', 'proc', 0, null, 0]], rlimits: [], quotas: [], workspaceOut: null, hostname: 'x' };
  let pid = -1;
  try {
    pid = f.forkRun(plan);
    log.push(`forkRun=${pid}`);
  } catch (e) {
    // Refused where the filter stands: cloning the namespaces of a run.
    if (e.step !== 'clone' || (e.errno !== 1 && e.errno !== 38))
      return escaped(`forkRun failed, but not at clone: step ${e.step}, ${e.message}`);
    log.push(`forkRun!${e.message}`);
  }
  if (pid === 0) f.exit(0);
  if (pid > 0) return escaped(`forkRun made a process: ${log.join(' ')}`);
  if (log.some((l) => l.startsWith('receive='))) return escaped(`receive() got a request: ${log.join(' ')}`);
  const unknown = names.filter((n) => !['becomeWorkload', 'codeOnHugePages', 'exit', 'fillRandom',
    'forkRun', 'ignoreChildren', 'pipe', 'platformWithoutWorkers', 'receive', 'recordZygoteFds'].includes(n));
  // An export not in that list (becomeWorkload has an attack of its own;
  // exit ends the process) is surface nobody has attacked.
  if (unknown.length) return escaped(`exports this attack does not call: ${unknown.join(',')}`);
  const denied = deniedCallsStillDenied();
  if (denied) return escaped(denied);
  return stopped(`exports ${names.join(',')}: ${log.join(' ')}`);
}
