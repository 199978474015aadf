// A thread that exists in the workload before its seccomp filter is loaded
// would run with the fork server's filter only, which allows namespaces and
// mounts. Start every kind of thread Node has (libuv's pool through fs,
// crypto and dns, a worker, its own pool), then check that every task of
// this process has the main thread's filters, no_new_privs and no
// capability.
async function main(args) {
  const { Worker } = require('worker_threads');
  const crypto = require('crypto');
  await Promise.all([
    fs.promises.readFile('/etc/hostname'),
    new Promise((resolve) => crypto.pbkdf2('x', 'y', 1000, 32, 'sha256', resolve)),
    require('dns').promises.lookup('localhost').catch(() => null),
  ]);
  const worker = new Worker("require('fs').promises.readFile('/etc/hostname'); setInterval(() => {}, 1000)", { eval: true });
  await new Promise((resolve) => worker.once('online', resolve));
  sleepMs(200);
  const want = ['Seccomp', 'Seccomp_filters', 'NoNewPrivs', 'CapEff', 'CapBnd'].map((k) => `${k}=${statusField(k)}`).join(' ');
  const tasks = fs.readdirSync('/proc/self/task');
  const odd = [];
  for (const tid of tasks) {
    let got;
    try {
      got = ['Seccomp', 'Seccomp_filters', 'NoNewPrivs', 'CapEff', 'CapBnd'].map((k) => `${k}=${statusField(k, `self/task/${tid}`)}`).join(' ');
    } catch (e) {
      continue; // ended meanwhile
    }
    if (got !== want) odd.push(`task ${tid}: ${got}`);
  }
  worker.terminate();
  if (!/Seccomp=2 /.test(want) || !/NoNewPrivs=1 /.test(want)) return escaped(`the main thread: ${want}`);
  if (tasks.length < 3) return escaped(`only ${tasks.length} tasks: the check proves little`);
  if (odd.length) return escaped(`tasks unlike the main thread (${want}): ${odd.join('; ')}`);
  return stopped(`${tasks.length} tasks, all ${want}`);
}
