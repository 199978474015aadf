// Flood stdout to exhaust the supervisor's memory.
// expect: truncated
function main(args) {
  const line = Buffer.from('x'.repeat(1023) + '\n');
  const block = Buffer.concat(Array(1024).fill(line)); // 1 MiB
  for (let i = 0; i < 64; ++i) fs.writeSync(1, block);
  return stopped('64 MiB written; the harness checks the capture was capped');
}
