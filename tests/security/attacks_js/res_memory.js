// Allocate far more memory than the limit, outside V8's heap (Buffers,
// touched) and inside it.
// expect: limit memory
function main(args) {
  const blocks = [];
  try {
    for (let i = 0; i < 64; ++i) blocks.push(Buffer.alloc(64 << 20, i + 1)); // 4 GiB in all, every page written
  } catch (e) {
    return stopped(`allocation refused after ${blocks.length * 64} MiB: ${e.message}`);
  }
  return escaped(`allocated ${blocks.length * 64} MiB`);
}
