// Send UDP datagrams out of the sandbox (DNS to a public resolver, the
// metadata address, a broadcast): with only lo, there is no route.
async function main(args) {
  const dgram = require('dgram');
  const tried = [];
  for (const [type, addr] of [['udp4', '8.8.8.8'], ['udp4', '169.254.169.254'], ['udp4', '255.255.255.255'], ['udp6', '2001:4860:4860::8888']]) {
    const start = Date.now();
    const s = dgram.createSocket(type);
    const r = await withTimeout(new Promise((resolve) => {
      s.once('error', (e) => resolve(e.code));
      s.bind(0, () => {
        try {
          s.setBroadcast(true);
        } catch (e) {
          /* not needed for the others */
        }
        s.send(Buffer.from('nsbox'), 53, addr, (e) => resolve(e ? e.code : 'sent'));
      });
    }), 3000, 'send').catch((e) => e.code);
    s.close();
    if (r === 'sent') return escaped(`a datagram left for ${addr}`);
    if (r !== 'ENETUNREACH') return escaped(`${addr}: ${r}, not 'no route'`);
    if (Date.now() - start > 2000) return escaped(`${addr}: ${r} only after ${Date.now() - start} ms`);
    tried.push(`${addr}: ${r}`);
  }
  return stopped(tried.join(', '));
}
