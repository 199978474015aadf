// Spin on the main thread and in workers, for far longer than the run's
// time limit (3 s): reaching the end means nothing stopped it.
// timeout: 3
// expect: limit wall_time cpu_time
function main(args) {
  const { Worker } = require('worker_threads');
  for (let i = 0; i < 4; ++i) new Worker('for (;;) {}', { eval: true });
  const start = Date.now();
  while (Date.now() - start < 20000) {}
  return escaped('spun for 20 s past a 3 s limit');
}
