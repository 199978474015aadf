// Call the add-on's becomeWorkload with a seccomp program that allows
// everything (once asking for a listener, with notify, once not): the
// filters already loaded must stay, and what they deny must stay denied.
// becomeWorkload moves the fds it is given over stdio and fd 3 and closes
// them, and Node cannot duplicate an fd: a child node (which inherits this
// process's filters) makes the calls, tries what they deny, and writes
// what it saw to a file.
// denied: mount unshare
function main(args) {
  const child = `
    const fs = require('fs');
    const childProcess = require('child_process');
    const forkinit = require(${JSON.stringify(FORKINIT)});
    ${statusField.toString()}
    ${confinement.toString()}
    const before = confinement();
    const allowAll = Buffer.from([0x06, 0, 0, 0, 0, 0, 0xff, 0x7f]); // ret SECCOMP_RET_ALLOW
    const attempts = [];
    for (const notify of [true, false]) {
      const [r, w] = forkinit.pipe();
      const n = () => fs.openSync('/dev/null', 'r+');
      try {
        attempts.push('notify=' + notify + ': returned ' + forkinit.becomeWorkload([n(), r, w, n(), n(), n(), n()], '/tmp', ['node'], allowAll, notify));
      } catch (e) {
        attempts.push('notify=' + notify + ': ' + e.message);
      }
    }
    // What the filters deny must still be denied, for this process's children too.
    ${deniedCallsStillDenied.toString()}
    // Opened only now: becomeWorkload refuses to go on past an fd it does not know.
    fs.writeFileSync('/tmp/become.json', JSON.stringify({ before, after: confinement(), attempts, denied: deniedCallsStillDenied() }));
    // Node's exit would wait for threads whose fds becomeWorkload replaced.
    process.kill(process.pid, 'SIGKILL');
  `;
  fs.rmSync('/tmp/become.json', { force: true });
  const r = childProcess.spawnSync(process.execPath, ['-e', child], { encoding: 'utf8', timeout: 20000 });
  let seen;
  try {
    seen = JSON.parse(fs.readFileSync('/tmp/become.json', 'utf8'));
  } catch (e) {
    return escaped(`the child reported nothing: ${r.status} ${r.signal} ${r.stderr}`);
  }
  const { before, after, attempts, denied } = seen;
  const filters = (s) => Number(/Seccomp_filters=(\d+)/.exec(s)[1]);
  if (!/Seccomp=2 /.test(after) || filters(after) < filters(before) || !/NoNewPrivs=1 /.test(after) ||
      !/CapEff=0+ /.test(after)) {
    return escaped(`confinement changed: ${before} -> ${after} (${attempts.join('; ')})`);
  }
  if (denied) return escaped(`${denied} (${attempts.join('; ')})`);
  return stopped(`${attempts.join('; ')}; ${before} -> ${after}; unshare and mount still refused`);
}
