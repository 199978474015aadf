// Every fd 0..1023 this process holds, by fstat and by /proc/self/fd: none
// may be a socket (the zygote's control socket, nsbox's run socket) nor a
// file of the fork server's sandbox; what remains are our pipes, event
// loop objects and /dev/null.
function main(args) {
  const bad = [];
  const kinds = {};
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
    if (st.isSocket()) bad.push(`fd ${fd} is a socket (${target})`);
    else if (!/^(pipe:|anon_inode:\[(eventpoll|eventfd|signalfd|timerfd)\]|\/dev\/null$|\/dev\/u?random$|\/proc\/)/.test(target)) {
      bad.push(`fd ${fd} -> ${target}`);
    }
  }
  if (bad.length) return escaped(bad.join('; '));
  return stopped(`fds: ${JSON.stringify(kinds)}`);
}
