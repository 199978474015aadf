// fetch() the cloud metadata service and other outside addresses, and the
// host's loopback service by URL.
async function main(args) {
  const tried = [];
  // fetch loads its implementation on first use (over 1 s under emulation):
  // done first, untimed, so that the timings below are the network's.
  await fetch('http://127.0.0.1:1/', { signal: AbortSignal.timeout(4000) }).catch(() => {});
  for (const url of ['http://169.254.169.254/latest/meta-data/', 'http://[fd00:ec2::254]/latest/meta-data/',
    'http://10.0.0.1/', 'http://8.8.8.8/', `http://127.0.0.1:${args.params.host_port}/`]) {
    const start = Date.now();
    const r = await fetch(url, { signal: AbortSignal.timeout(4000) })
      .then((res) => `answered ${res.status}`)
      .catch((e) => (e.cause && e.cause.code) || e.name);
    if (r.startsWith('answered')) return escaped(`${url} ${r}`);
    if (r === 'TimeoutError' || r === 'AbortError') return escaped(`${url}: no refusal, a timeout (a route out exists?)`);
    const expected = url.includes('127.0.0.1') ? 'ECONNREFUSED' : 'ENETUNREACH';
    if (r !== expected) return escaped(`${url}: ${r}, not ${expected}`);
    if (Date.now() - start > 2000) return escaped(`${url}: ${r} only after ${Date.now() - start} ms`);
    tried.push(`${url}: ${r}`);
  }
  return stopped(tried.join(', '));
}
