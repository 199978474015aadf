// Read the host's secret file: by its path, through /proc/self/root, and by
// walking up from the cwd with fs.realpath, fs.opendir and relative paths.
function main(args) {
  const { secret, secret_path } = args.params;
  const up = '../'.repeat(40) + secret_path.replace(/^\//, '');
  for (const path of [secret_path, '/proc/self/root' + secret_path, '/proc/self/cwd/' + up, up]) {
    if (readsSecret(path, secret)) return escaped('read the host secret at ' + path);
  }
  const dir = secret_path.replace(/\/[^/]*$/, '');
  const there = fs.existsSync(dir) ? fs.readdirSync(dir) : null;
  if (there && there.length) return escaped(`the host directory ${dir} is visible: ${there.join(',')}`);
  return stopped(`${secret_path} is not there (${fs.existsSync(secret_path) ? 'exists' : 'ENOENT'})`);
}
