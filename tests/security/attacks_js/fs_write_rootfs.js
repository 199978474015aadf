// Plant code in the read-only root: node itself, the runner, the fork
// server's zygote.js and add-on, a module every run requires, /etc.
function main(args) {
  return allStopped([
    fails('append /usr/local/bin/node', () => fs.appendFileSync('/usr/local/bin/node', '')),
    fails('write /opt/nsbox/runner.js', () => fs.writeFileSync('/opt/nsbox/runner.js', '//')),
    fails('write /opt/nsbox/zygote.js', () => fs.openSync('/opt/nsbox/zygote.js', 'r+')),
    fails('write /opt/nsbox/forkinit.node', () => fs.openSync('/opt/nsbox/forkinit.node', 'r+')),
    fails('create /usr/local/lib/node_modules/x.js', () => fs.writeFileSync('/usr/local/lib/node_modules/x.js', '1')),
    fails('create /etc/nsbox-owned', () => fs.writeFileSync('/etc/nsbox-owned', '1')),
    fails('chmod /opt/nsbox/zygote.js', () => fs.chmodSync('/opt/nsbox/zygote.js', 0o777)),
    fails('rename /opt/nsbox/runner.js', () => fs.renameSync('/opt/nsbox/runner.js', '/opt/nsbox/r.js')),
  ]);
}
