// Read or write PID 1's memory through /proc/1/mem (a copy of nsbox's, or
// in a forked run the fork server's until PID 1 execs), its map_files, and
// learn its layout from /proc/1/maps.
function main(args) {
  return allStopped([
    fails('open /proc/1/mem rw', () => fs.openSync('/proc/1/mem', 'r+')),
    fails('open /proc/1/mem r', () => fs.openSync('/proc/1/mem', 'r')),
    fails('list /proc/1/map_files', () => fs.readdirSync('/proc/1/map_files')),
    fails('read /proc/1/maps', () => fs.readFileSync('/proc/1/maps', 'utf8').slice(0, 200)),
  ]);
}
