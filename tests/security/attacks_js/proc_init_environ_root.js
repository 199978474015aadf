// PID 1's environment and root: /proc/1/environ (the supervisor's or the
// fork server's environment), /proc/1/root to the host's secret file.
function main(args) {
  const { secret, secret_path } = args.params;
  for (const path of ['/proc/1/root' + secret_path, '/proc/1/cwd' + secret_path, '/proc/self/root' + secret_path,
    secret_path]) {
    if (readsSecret(path, secret)) return escaped('read the host secret through ' + path);
  }
  let environ = null;
  try {
    environ = fs.readFileSync('/proc/1/environ', 'latin1');
  } catch (e) {
    return stopped(`/proc/1/environ: ${e.code}; the secret file is unreachable`);
  }
  if (environ.includes(secret) || environ.includes('NSBOX_SECRET')) return escaped('/proc/1/environ holds the host environment');
  return stopped(`/proc/1/environ readable but nsbox's own (${environ.length} bytes)`);
}
