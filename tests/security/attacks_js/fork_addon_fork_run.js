// Load the fork server's add-on and fork a new run of our own: a PID 1 in
// fresh user, pid and mount namespaces, where we would hold every
// capability, outside this run's seccomp filter's reach for mounts.
// denied: clone
function main(args) {
  const forkinit = require(FORKINIT);
  const devnull = () => fs.openSync('/dev/null', 'r+');
  const plan = {
    fds: [devnull(), devnull(), devnull(), devnull(), devnull(), devnull(), devnull()],
    controlFd: 3, uid: 65534, gid: 65534, mounts: [], rlimits: [], quotas: [], workspaceOut: null, hostname: 'mine',
  };
  let pid;
  try {
    pid = forkinit.forkRun(plan);
  } catch (e) {
    if (e.step === 'clone' && (e.errno === 1 || e.errno === 38)) return stopped(`forkRun: ${e.message}`);
    return escaped(`forkRun failed, but not at clone: ${e.message}`);
  }
  if (pid === 0) forkinit.exit(0); // the workload of a run of our own
  return escaped(`forkRun made a PID 1 of our own: pid ${pid}`);
}
