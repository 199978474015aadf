// Learn host paths and devices from the mount table: where the rootfs lives
// on the host, the host's disks and filesystems. In a forked run the table
// also lists the Node fork server's own mounts (covered by the run's).
// What nsbox mounts: the rootfs overlay, tmpfs, proc, devpts, and device
// nodes bound from devtmpfs (their path inside devtmpfs is their name).
const OWN_FS = new Set(['overlay', 'tmpfs', 'proc', 'devpts', 'devtmpfs']);
const DEVICE_NODES = new Set(['/null', '/zero', '/full', '/random', '/urandom', '/tty']);
function main(args) {
  const p = args.params;
  const needles = [p.rootfs, ...p.host_block_devices].filter(Boolean);
  let read = 0;
  for (const table of ['/proc/self/mountinfo', '/proc/1/mountinfo']) {
    let text;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch (e) {
      continue;
    }
    ++read;
    for (const needle of needles) if (text.includes(needle)) return escaped(`${table} names ${needle}`);
    for (const line of text.trim().split('\n')) {
      const [pre, post] = line.split(' - ');
      const root = pre.split(' ')[3];
      const [fstype, source] = post.split(' ');
      if (!OWN_FS.has(fstype)) return escaped(`${table} shows a ${fstype} filesystem from ${source}: ${line.slice(0, 200)}`);
      if (root !== '/' && !(fstype === 'devtmpfs' && DEVICE_NODES.has(root))) return escaped(`${table} shows a bind of ${root} from ${fstype}`);
      if (source.startsWith('/')) return escaped(`${table} names a host source ${source}`);
    }
  }
  if (read === 0) return escaped('no mount table readable: the check proves nothing');
  return stopped('the mount table names no host path, disk or foreign filesystem');
}
