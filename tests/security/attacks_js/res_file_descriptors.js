// Open files until the host runs out of file descriptors.
function main(args) {
  const fds = [];
  try {
    for (let i = 0; i < 1000000; ++i) fds.push(fs.openSync('/dev/null', 'r'));
  } catch (e) {
    if (e.code === 'EMFILE' && fds.length < 4096) return stopped(`EMFILE after ${fds.length} fds`);
    return escaped(`${e.code} after ${fds.length} fds`);
  } finally {
    for (const fd of fds) fs.closeSync(fd);
  }
  return escaped(`${fds.length} fds open`);
}
