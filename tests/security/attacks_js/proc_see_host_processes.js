// Find processes outside the run: the harness, nsbox, the fork server
// (zygote.js), by /proc and by probing every pid with signal 0.
function main(args) {
  const inProc = fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).map(Number);
  // kill() takes thread ids too: our own threads answer.
  const threads = new Set(inProc.flatMap((p) => {
    try {
      return fs.readdirSync(`/proc/${p}/task`).map(Number);
    } catch (e) {
      return [];
    }
  }));
  const alive = [];
  for (let pid = 1; pid <= 65536; ++pid) {
    try {
      process.kill(pid, 0);
      if (!threads.has(pid)) alive.push(pid);
    } catch (e) {
      if (e.code !== 'ESRCH' && !threads.has(pid)) alive.push(pid); // EPERM: exists
    }
  }
  if (alive.includes(args.params.host_pid) && args.params.host_pid > 3) return escaped(`the harness's pid ${args.params.host_pid} answers`);
  if (alive.length || inProc.length > 3) return escaped(`processes seen: /proc ${inProc.join(',')} kill(0) ${alive.slice(0, 20).join(',')}`);
  return stopped(`only ${inProc.join(',')} exist (we are ${process.pid}), threads ${[...threads].join(',')}`);
}
