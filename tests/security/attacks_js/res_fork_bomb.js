// child_process fork bomb: spawn until the host runs out of processes.
// expect: limit pids
// expect: no_process
// timeout: 30
function main(args) {
  const children = [];
  for (let i = 0; i < 3000; ++i) {
    try {
      const c = childProcess.spawn('sleep', ['30'], { argv0: `${args.params.marker}-sleeper`, stdio: 'ignore' });
      c.on('error', () => {}); // a refused spawn also comes as an event
      if (!c.pid) return stopped(`spawn refused after ${children.length} (no pid)`);
      children.push(c);
    } catch (e) {
      return stopped(`spawn refused after ${children.length}: ${e.code || e.message}`);
    }
  }
  return escaped(`${children.length} processes spawned`);
}
