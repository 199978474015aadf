// process.dlopen the add-on into a module of our own and call every export
// it has, with arguments an attacker would pick (the zygote's control fd, a
// plan mounting proc over /), then look for any sign of the fork server.
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
  const plan = { fds: [3, 3, 3, 3, 3, 3, 3], controlFd: 3, uid: 0, gid: 0,
    mounts: [['proc', '/', 'proc', 0, null, 0]], rlimits: [], workspaceOut: null, hostname: 'x' };
  let pid = -1;
  try {
    pid = f.forkRun(plan);
    log.push(`forkRun=${pid}`);
  } catch (e) {
    log.push(`forkRun!${e.message}`);
  }
  if (pid === 0) f.exit(0);
  if (pid > 0) return escaped(`forkRun made a process: ${log.join(' ')}`);
  if (log.some((l) => l.startsWith('receive='))) return escaped(`receive() got a request: ${log.join(' ')}`);
  const unknown = names.filter((n) => !['becomeWorkload', 'exit', 'fillRandom', 'forkRun', 'ignoreChildren',
    'pipe', 'receive', 'recordZygoteFds'].includes(n));
  const denied = deniedCallsStillDenied();
  if (denied) return escaped(denied);
  return stopped(`exports ${names.join(',')}${unknown.length ? ' (new: ' + unknown.join(',') + ')' : ''}: ${log.join(' ')}`);
}
