// Every fd 0..1023 this process holds, by fstat and by /proc/self/fd: none
// may be a socket (the zygote's control socket, nsbox's run socket) nor a
// file of the fork server's sandbox; what remains are stdio, the result pipe
// (fd 3), event loop objects, /dev/null and libuv's own pipes. libuv makes
// those in pairs, so past fd 3 a pipe must have both its ends here: one whose
// other end is outside (a supervisor's or the zygote's) is a leak.
function main(args) {
  const bad = [];
  const kinds = {};
  const pipeEnds = new Map(); // pipe inode -> fds past 3 that hold it
  const listed = new Set(fs.readdirSync('/proc/self/fd').map(Number));
  for (let fd = 0; fd < 1024; ++fd) {
    let st;
    try {
      st = fs.fstatSync(fd);
    } catch (e) {
      if (listed.has(fd) && e.code !== 'EBADF') bad.push(`fd ${fd}: fstat ${e.code}`);
      continue;
    }
    let target = '?';
    try {
      target = fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch (e) {
      continue; // the listing's own fd, already closed
    }
    const kind = target.replace(/\[\d+\]$/, '');
    kinds[kind] = (kinds[kind] || 0) + 1;
    if (fd > 3 && target.startsWith('pipe:')) pipeEnds.set(target, [...(pipeEnds.get(target) || []), fd]);
    if (st.isSocket()) bad.push(`fd ${fd} is a socket (${target})`);
    else if (!/^(pipe:|anon_inode:\[(eventpoll|eventfd|signalfd|timerfd)\]|\/dev\/null$|\/dev\/u?random$|\/proc\/)/.test(target)) {
      bad.push(`fd ${fd} -> ${target}`);
    }
  }
  for (const [pipe, fds] of pipeEnds) {
    const modes = fds.map((fd) => fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').match(/^flags:\s*(\d+)/m)[1]);
    const accmodes = modes.map((m) => parseInt(m, 8) & 3).sort().join(',');
    if (accmodes !== '0,1') bad.push(`${pipe} at fds ${fds.join(',')} is not a pair of our own (access modes ${accmodes})`);
  }
  if (bad.length) return escaped(bad.join('; '));
  return stopped(`fds: ${JSON.stringify(kinds)}`);
}
