// Connect to the host's abstract unix socket (abstract names belong to a
// network namespace, not to a path a mount could hide).
async function main(args) {
  const net = require('net');
  const r = await withTimeout(new Promise((resolve) => {
    const s = net.connect({ path: '\0' + args.params.abstract });
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (e) => resolve(e.code));
  }), 3000, 'connect').catch((e) => e.code);
  if (r === 'connected') return escaped('connected to the host\'s abstract socket @' + args.params.abstract);
  return r === 'ECONNREFUSED' ? stopped('abstract socket: ' + r) : escaped('unexpected answer: ' + r);
}
