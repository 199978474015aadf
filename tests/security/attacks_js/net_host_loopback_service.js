// Reach the service listening on the host's 127.0.0.1 (and ::1, and the
// unspecified address, which Linux routes to the local host).
async function main(args) {
  const net = require('net');
  const port = args.params.host_port;
  const tried = [];
  for (const host of ['127.0.0.1', '::1', '0.0.0.0', 'localhost']) {
    const start = Date.now();
    const r = await withTimeout(new Promise((resolve) => {
      const s = net.connect({ host, port });
      s.once('connect', () => {
        s.destroy();
        resolve('connected');
      });
      s.once('error', (e) => resolve(e.code));
    }), 3000, 'connect').catch((e) => e.code);
    if (r === 'connected') return escaped(`connected to ${host}:${port}`);
    // Refused at once by the sandbox's own loopback: a timeout would mean
    // the packets went somewhere.
    if (r !== 'ECONNREFUSED') return escaped(`${host}:${port}: ${r}, not a refusal`);
    if (Date.now() - start > 2000) return escaped(`${host}:${port}: refused only after ${Date.now() - start} ms`);
    tried.push(`${host}: ${r}`);
  }
  return stopped(tried.join(', '));
}
