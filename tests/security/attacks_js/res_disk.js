// Fill the writable places (/tmp, /dev/shm, the workspace) until the host's
// disk or memory runs out, in files each under the file size limit (64 MiB),
// so that only each mount's own cap (64 MiB by default) can stop it.
const CAP = 64 << 20;
function main(args) {
  const chunk = Buffer.alloc(1 << 20, 7);
  const filled = [];
  for (const dir of ['/tmp', '/dev/shm', '/workspace/out']) {
    fs.mkdirSync(dir, { recursive: true });
    try {
      for (let i = 0; i < 32; ++i) { // 512 MiB in all
        const fd = fs.openSync(`${dir}/fill-${i}`, 'w');
        try {
          for (let j = 0; j < 16; ++j) fs.writeSync(fd, chunk);
        } finally {
          fs.closeSync(fd);
        }
      }
      return escaped(`${dir} took 512 MiB`);
    } catch (e) {
      if (e.code !== 'ENOSPC') return escaped(`${dir}: ${e.code}, not ENOSPC`);
    }
    // What the mount holds at ENOSPC: the cap, not some other failure.
    const names = fs.readdirSync(dir).filter((f) => f.startsWith('fill-'));
    const stored = names.reduce((sum, f) => sum + fs.statSync(`${dir}/${f}`).size, 0);
    if (stored > CAP) return escaped(`${dir} held ${stored >> 20} MiB at ENOSPC, past the ${CAP >> 20} MiB cap`);
    filled.push(`${dir}: ENOSPC at ${(stored / (1 << 20)).toFixed(1)} MiB`);
    for (const f of names) fs.rmSync(`${dir}/${f}`);
  }
  return stopped(filled.join(', '));
}
