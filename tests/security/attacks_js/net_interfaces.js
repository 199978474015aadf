// Look for a way out: any interface but lo, any address but loopback.
function main(args) {
  let ifaces = {};
  try {
    ifaces = require('os').networkInterfaces();
  } catch (e) {
    /* netlink is refused: nothing to list */
  }
  const names = Object.keys(ifaces);
  const addrs = Object.values(ifaces).flat().map((a) => a.address);
  const bad = addrs.filter((a) => a !== '127.0.0.1' && a !== '::1');
  if (names.some((n) => n !== 'lo') || bad.length) return escaped(`interfaces ${names.join(',')}: ${addrs.join(', ')}`);
  let dev = '';
  try {
    dev = fs.readFileSync('/proc/net/dev', 'utf8');
  } catch (e) {
    /* masked */
  }
  const listed = dev.split('\n').slice(2).map((l) => l.split(':')[0].trim()).filter(Boolean);
  if (listed.some((n) => n !== 'lo')) return escaped('/proc/net/dev lists ' + listed.join(','));
  return stopped(`only lo: ${addrs.join(', ')}`);
}
