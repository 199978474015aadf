// Open files until the host runs out of file descriptors.
const LIMIT = 256; // the default profile's open_files
function main(args) {
  const fds = [];
  try {
    for (let i = 0; i < 1000000; ++i) fds.push(fs.openSync('/dev/null', 'r'));
  } catch (e) {
    const highest = fds.reduce((a, b) => Math.max(a, b), -1);
    if (e.code === 'EMFILE' && highest < LIMIT) return stopped(`EMFILE after ${fds.length} fds, the highest ${highest}`);
    return escaped(`${e.code} after fd ${highest} (limit ${LIMIT})`);
  } finally {
    for (const fd of fds) fs.closeSync(fd);
  }
  return escaped(`${fds.length} fds open`);
}
