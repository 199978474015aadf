// Reach PID 1's fds (its socket to nsbox's supervisor) through /proc/1/fd,
// fdinfo, and through the fds of its threads in /proc/1/task.
function main(args) {
  return allStopped([
    fails('list /proc/1/fd', () => fs.readdirSync('/proc/1/fd')),
    fails('open /proc/1/fd/0', () => fs.openSync('/proc/1/fd/0', 'r')),
    fails('open /proc/1/fd/3', () => fs.openSync('/proc/1/fd/3', 'r')),
    fails('list /proc/1/task/1/fd', () => fs.readdirSync('/proc/1/task/1/fd')),
    fails('list /proc/1/fdinfo', () => fs.readdirSync('/proc/1/fdinfo')),
  ]);
}
