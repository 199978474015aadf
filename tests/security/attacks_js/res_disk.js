// Fill the writable places (/tmp, /dev/shm, the workspace) until the host's
// disk or memory runs out: each must be capped (64 MiB by default).
function main(args) {
  const chunk = Buffer.alloc(16 << 20, 7);
  const filled = [];
  for (const dir of ['/tmp', '/dev/shm', '/workspace/out']) {
    fs.mkdirSync(dir, { recursive: true });
    let mib = 0;
    try {
      for (let i = 0; i < 32; ++i, mib += 16) fs.writeFileSync(`${dir}/fill-${i}`, chunk); // 512 MiB, in files under any size limit
      return escaped(`${dir} took ${mib} MiB`);
    } catch (e) {
      if (e.code !== 'ENOSPC' || mib > 96) return escaped(`${dir}: ${e.code} after ${mib} MiB`);
      filled.push(`${dir}: ENOSPC after ${mib} MiB`);
    }
    for (const f of fs.readdirSync(dir)) if (f.startsWith('fill-')) fs.rmSync(`${dir}/${f}`);
  }
  return stopped(filled.join(', '));
}
