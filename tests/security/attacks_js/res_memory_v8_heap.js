// Grow V8's own heap (arrays of numbers and strings) past the memory limit,
// with the heap limit itself raised first.
// expect: limit memory
function main(args) {
  require('v8').setFlagsFromString('--max-old-space-size=8192');
  const keep = [];
  let mib = 0;
  for (; mib < 4096; mib += 8) keep.push(new Array(1 << 20).fill(mib + 0.5)); // 8 MiB of doubles
  return escaped(`held ${mib} MiB of arrays`);
}
