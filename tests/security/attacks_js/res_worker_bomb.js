// worker_threads bomb: every worker is a thread (and an isolate): start
// them until the host runs out of threads or memory.
// Under emulation (the v2 guest) workers start so slowly that the wall
// clock ends it first: that too is a limit holding.
// expect: limit memory pids wall_time
async function main(args) {
  const { Worker } = require('worker_threads');
  const workers = [];
  for (let i = 0; i < 2000; ++i) {
    const w = new Worker('setInterval(() => {}, 1000)', { eval: true });
    const started = await withTimeout(new Promise((resolve) => {
      w.once('online', () => resolve(true));
      w.once('error', (e) => resolve(e));
    }), 10000, 'worker start').catch((e) => e);
    if (started !== true) return stopped(`worker ${i} refused: ${started && (started.code || started.message)}`);
    workers.push(w);
  }
  return escaped(`${workers.length} workers running`);
}
