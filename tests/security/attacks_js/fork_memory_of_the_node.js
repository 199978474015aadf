// Search this process's own memory (/proc/self/mem: in a forked run, a copy
// of the fork server's) for what the node or the harness holds: the
// harness's secret variable in the host environment, the node's bearer
// tokens, the secret file's content. Each needle is matched in two halves,
// so that its own pieces in this process (source text, buffers) never
// match (this comment names none of them whole).
// Buffer.from puts small buffers one after the other in a shared pool:
// the two halves would then lie side by side. Each gets its own allocation.
function unpooled(text) {
  const b = Buffer.allocUnsafeSlow(text.length);
  b.write(text, 'latin1');
  return b;
}

function main(args) {
  const needles = [['NSBOX_SECRET_', 'TOKEN='], ['-attacker-', 'token-0123456789'], ['host sec', 'ret: ']]
    .map((halves) => halves.map(unpooled));
  const maps = fs.readFileSync('/proc/self/maps', 'utf8').trim().split('\n').map((l) => l.split(/\s+/));
  const mem = fs.openSync('/proc/self/mem', 'r');
  const chunk = Buffer.alloc(1 << 20);
  let scanned = 0;
  const hits = [];
  for (const [range, perms, , , , path] of maps) {
    // Files mapped from the rootfs (node's own 100 MiB among them) hold
    // only what the rootfs does: anonymous memory, heap and stack are read.
    if (perms[0] !== 'r' || path === '[vvar]' || path === '[vsyscall]' || (path && path.startsWith('/'))) continue;
    const [start, end] = range.split('-').map((h) => parseInt(h, 16));
    for (let at = start; at < end; at += chunk.length - 64) {
      let n;
      try {
        n = fs.readSync(mem, chunk, 0, Math.min(chunk.length, end - at), at);
      } catch (e) {
        break; // unreadable (guard pages)
      }
      scanned += n;
      const view = chunk.subarray(0, n);
      for (const [a, b] of needles) {
        for (let i = view.indexOf(a); i >= 0; i = view.indexOf(a, i + 1)) {
          if (view.subarray(i + a.length, i + a.length + b.length).equals(b)) {
            hits.push(`${a}${b} at 0x${(at + i).toString(16)} in ${path || 'anonymous'}: ` +
              JSON.stringify(view.subarray(i, i + 80).toString('latin1')));
          }
        }
      }
    }
  }
  fs.closeSync(mem);
  if (scanned < (1 << 20)) return escaped(`only ${scanned} bytes of our own memory read: the check proves nothing`);
  if (hits.length) return escaped(hits.slice(0, 3).join('; '));
  return stopped(`${scanned >> 20} MiB of our memory hold nothing of the node or the host`);
}
