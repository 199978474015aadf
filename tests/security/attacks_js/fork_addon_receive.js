// Take the fork server's requests (the next run's stdio, result pipe and
// socket to nsbox) with the add-on's receive(): on the zygote's control fd
// (3) and on any other fd this process holds that is a socket.
function main(args) {
  const forkinit = require(FORKINIT);
  const tried = [];
  for (let fd = 0; fd < 1024; ++fd) {
    let st;
    try {
      st = fs.fstatSync(fd);
    } catch (e) {
      continue;
    }
    // A socket here is not ours (we made none): it may be the zygote's
    // control socket, and receive() on it would block for the next request.
    if (st.isSocket()) return escaped(`fd ${fd} is a socket: ${fs.readlinkSync(`/proc/self/fd/${fd}`)}`);
    try {
      const request = forkinit.receive(fd);
      return escaped(`receive(${fd}) answered ${JSON.stringify(request)}`);
    } catch (e) {
      tried.push(`${fd}:${e.errno}`);
    }
  }
  return stopped(`no socket among our fds; receive() failed on ${tried.join(' ')}`);
}
