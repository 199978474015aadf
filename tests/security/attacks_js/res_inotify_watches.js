// Watch files until host root, which the kernel charges for every run's
// inotify watches, has none left: the host's own file watchers would then
// fail with ENOSPC. libuv adds one watch per fs.watch of a new file.
const LIMIT = 8192; // the default profile's limits.inotify_watches
function main(args) {
  fs.mkdirSync('/tmp/watched');
  const watchers = [];
  try {
    for (let i = 0; i < LIMIT + 100; ++i) {
      fs.writeFileSync(`/tmp/watched/${i}`, '');
      watchers.push(fs.watch(`/tmp/watched/${i}`));
    }
    return escaped(`${watchers.length} watches`);
  } catch (e) {
    if (e.code === 'ENOSPC' && watchers.length === LIMIT) return stopped(`ENOSPC after ${watchers.length} watches, this run's quota`);
    return escaped(`${watchers.length} watches, then ${e.code} (quota ${LIMIT})`);
  } finally {
    for (const w of watchers) w.close();
  }
}
