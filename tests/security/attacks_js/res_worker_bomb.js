// worker_threads bomb: every worker is a thread (and an isolate) holding
// 16 MiB: start them until the host runs out of threads or memory. (Each
// worker also holds a few fds: without the 16 MiB, open_files, which the
// run's result cannot name, stopped it at 59 workers in the v2 guest.)
// Under emulation workers start so slowly that the wall clock may end the
// run before either (that too is a limit holding).
// expect: limit memory pids wall_time
async function main(args) {
  const { Worker } = require('worker_threads');
  const workers = [];
  for (let i = 0; i < 2000; ++i) {
    const w = new Worker('const held = Buffer.alloc(16 << 20, 1); setInterval(() => ++held[0], 1000);', { eval: true });
    // No deadline of our own: a slow start is not a refusal (the run's
    // limits end a bomb that stalls).
    const started = await new Promise((resolve) => {
      w.once('online', () => resolve(true));
      w.once('error', (e) => resolve(e));
    });
    if (started !== true) return stopped(`worker ${i} refused: ${started.code} ${started.message}`);
    workers.push(w);
  }
  return escaped(`${workers.length} workers running`);
}
