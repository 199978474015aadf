// Resolve names (DNS exfiltration) with dns.lookup (getaddrinfo) and
// dns.resolve (c-ares): both must fail, and at once, not after a timeout.
async function main(args) {
  const dns = require('dns').promises;
  const tried = [];
  for (const [what, fn] of [['lookup', () => dns.lookup('example.com')],
    ['resolve4', () => dns.resolve4(`${args.params.marker}.example.com`)]]) {
    const start = Date.now();
    const r = await withTimeout(fn().then((a) => 'resolved ' + JSON.stringify(a)), 5000, what).catch((e) => e.code);
    const took = Date.now() - start;
    if (r.startsWith('resolved')) return escaped(`${what}: ${r}`);
    if (took > 2000) return escaped(`${what} failed only after ${took} ms (${r})`);
    tried.push(`${what}: ${r} in ${took} ms`);
  }
  return stopped(tried.join(', '));
}
