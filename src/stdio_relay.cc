#include "nsbox/stdio_relay.h"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "nsbox/error.h"
#include "nsbox/units.h"

namespace nsbox {

namespace {

const char* stdio_name(int fd) { return fd == 0 ? "standard input" : fd == 1 ? "standard output" : "standard error"; }

// A socket is never handed to a run: a TCP one can be disconnected
// (connect with AF_UNSPEC) and connected anywhere from the caller's network
// namespace, a datagram one sends anywhere, and any can be shut down under
// the caller. A connected stream socket is relayed like a file; what cannot
// be relayed as a stream is refused.
void check_relayable_socket(int fd) {
  int type = 0, listening = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    throw SysError("getsockopt SO_TYPE", stdio_name(fd), errno);
  const std::string what = std::string(stdio_name(fd)) + " is ";
  const std::string why =
      ": a run given it would send and connect from nsbox's network namespace, and "
      "nsbox relays connected stream sockets only; give it a pipe or a file";
  if (type != SOCK_STREAM)
    throw UsageError(what +
                     (type == SOCK_DGRAM       ? "a datagram socket"
                      : type == SOCK_SEQPACKET ? "a packet (SOCK_SEQPACKET) socket"
                      : type == SOCK_RAW       ? "a raw socket"
                                               : "a socket of type " + std::to_string(type)) +
                     why);
  len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening)
    throw UsageError(what + "a listening socket" + why);
  sockaddr_storage peer{};
  len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 && errno == ENOTCONN)
    throw UsageError(what + "a socket that is not connected" + why);
}

// What a run gets for stdio fd. kRelay: a pipe that a thread of nsbox copies
// to or from the caller's file, which the run must not hold itself: a file or
// block device (its path, its contents through /proc/self/fd, ftruncate), a
// named FIFO (its path), a socket (see above) and, as input, a terminal (it
// would read what the operator types while it runs in the background: a
// sandbox is a session of its own, which the terminal's job control does not
// reach). kReopen: the same pipe or terminal through a description of its
// own, so that what the run sets on it (O_NONBLOCK, which Node leaves behind
// when it is killed) is not the caller's; a terminal opened for writing only.
// fstat failing (a closed fd, which main() never leaves) hands it over as it is.
enum class Handling { kAsIs, kRelay, kReopen };

Handling handling_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Handling::kAsIs;
  if (S_ISDIR(st.st_mode))
    throw UsageError(std::string(stdio_name(fd)) +
                     " is a directory: a sandbox given it could reach the host's files through it");
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return Handling::kRelay;
  if (S_ISSOCK(st.st_mode)) {
    check_relayable_socket(fd);
    return Handling::kRelay;
  }
  if (S_ISFIFO(st.st_mode)) {
    struct statfs fs {};
    const bool anonymous = ::fstatfs(fd, &fs) == 0 && fs.f_type == PIPEFS_MAGIC;
    return anonymous ? Handling::kReopen : Handling::kRelay;
  }
  if (::isatty(fd)) return fd == 0 ? Handling::kRelay : Handling::kReopen;
  return Handling::kAsIs;
}

bool is_socket(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

// Whether fds a and b of this process write to one file: one open file
// (2>&1), or one regular file opened twice (>>log 2>>log).
bool same_file(int a, int b) {
  const pid_t self = ::getpid();
  if (::syscall(SYS_kcmp, self, self, KCMP_FILE, a, b) == 0) return true;
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && S_ISREG(sa.st_mode) && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

StdioRelay::StdioRelay(uint64_t max_output_bytes) : max_output_bytes_(max_output_bytes) {
  const Handling in = handling_of(0), out = handling_of(1), err = handling_of(2);
  try {
    if (in == Handling::kRelay) add_lane({0}, true);
    if (in == Handling::kReopen) reopen({0});
    for (const Handling how : {Handling::kRelay, Handling::kReopen}) {
      const bool o = out == how, e = err == how;
      // One lane or description for 2>&1: the two streams keep the order written.
      if (o && e && same_file(1, 2)) {
        how == Handling::kRelay ? add_lane({1, 2}, false) : reopen({1, 2});
        continue;
      }
      if (o) how == Handling::kRelay ? add_lane({1}, false) : reopen({1});
      if (e) how == Handling::kRelay ? add_lane({2}, false) : reopen({2});
    }
  } catch (...) {
    finish();
    throw;
  }
}

StdioRelay::~StdioRelay() { finish(); }

void StdioRelay::add_lane(std::vector<int> targets, bool input) {
  auto lane = std::make_unique<Lane>();
  lane->input = input;
  lane->targets = std::move(targets);
  const int first = lane->targets.front();
  lane->original.reset(::fcntl(first, F_DUPFD_CLOEXEC, 3));
  if (!lane->original) throw SysError("dup", stdio_name(first), errno);
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) throw SysError("pipe", std::string("relay of ") + stdio_name(first), errno);
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  UniqueFd& sandbox_end = input ? read_end : write_end;
  lane->socket = is_socket(first);
  // A socket is received from as it is, without blocking (it cannot be
  // opened anew): what the run had not read when it ends is consumed.
  if (input && !lane->socket) {
    // Read from where the caller's offset is, which moves only by what the
    // run read (finish()): a shell loop's next line is not ours.
    lane->start = ::lseek(lane->original.get(), 0, SEEK_CUR);
    if (lane->start < 0) {
      // A terminal or FIFO: read through a description of our own that does
      // not block (the caller's must not change), or a read that poll
      // allowed could still wait for the operator forever and hold up
      // finish() (seen on a 6.1 kernel's pty).
      const std::string path = "/proc/self/fd/" + std::to_string(first);
      lane->reader.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      if (!lane->reader) throw SysError("open for reading", stdio_name(first), errno);
    }
    lane->unread_probe.reset(::fcntl(read_end.get(), F_DUPFD_CLOEXEC, 3));
    if (!lane->unread_probe) throw SysError("dup", "relay of standard input", errno);
  }
  struct stat st {};
  if (!input && ::fstat(first, &st) == 0 && S_ISFIFO(st.st_mode)) {
    // Written without blocking, so that a reader that stopped reading
    // cannot hold nsbox once it is told to stop (finish()); the caller's
    // description keeps its flags. Without one (no reader right now), the
    // caller's own is written as it is.
    const std::string path = "/proc/self/fd/" + std::to_string(first);
    lane->writer.reset(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  }
  lane->ours = std::move(input ? write_end : read_end);
  if (::fcntl(lane->ours.get(), F_SETFL, O_NONBLOCK) != 0)
    throw SysError("fcntl", std::string("relay of ") + stdio_name(first), errno);
  // The lane is complete before any stdio number changes: finish() puts
  // back every number of every lane listed.
  Lane& l = *lane;
  lanes_.push_back(std::move(lane));
  for (int target : l.targets) {
    if (::dup2(sandbox_end.get(), target) < 0) throw SysError("dup2", stdio_name(target), errno);
  }
  l.thread = std::thread([this, &l] {
    // A run that stops reading its input makes our write fail with EPIPE;
    // the signal it raises stays with this thread, blocked.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    if (l.input) {
      pump_input(l);
    } else {
      pump_output(l);
    }
  });
}

void StdioRelay::reopen(std::vector<int> targets) {
  const int first = targets.front();
  const int flags = ::fcntl(first, F_GETFL);
  if (flags < 0) throw SysError("fcntl F_GETFL", stdio_name(first), errno);
  const bool terminal = ::isatty(first);
  auto lane = std::make_unique<Lane>();
  lane->targets = std::move(targets);
  lane->original.reset(::fcntl(first, F_DUPFD_CLOEXEC, 3));
  if (!lane->original) throw SysError("dup", stdio_name(first), errno);
  // A terminal for writing only: the caller's description is usually its
  // stdin's too, through which the run would read what the operator types.
  // A pipe as it was opened.
  const std::string path = "/proc/self/fd/" + std::to_string(first);
  UniqueFd own(::open(path.c_str(), (terminal ? O_WRONLY | O_NOCTTY : flags & O_ACCMODE) | O_CLOEXEC));
  if (!own && !terminal && errno == EACCES) {
    // A pipe of another user, as nsbox runs unprivileged: handed over as it
    // is, its flags put back after the run.
    lane->flags_to_restore = flags;
    lanes_.push_back(std::move(lane));
    return;
  }
  if (!own)
    throw SysError(terminal ? "open for writing only" : "open anew",
                   std::string(terminal ? "the terminal of " : "the pipe of ") + stdio_name(first), errno);
  // Packet mode (O_DIRECT) cannot be asked of open on a pipe, only set.
  if ((flags & O_DIRECT) && !terminal && ::fcntl(own.get(), F_SETFL, O_DIRECT) != 0)
    throw SysError("fcntl O_DIRECT", std::string("the pipe of ") + stdio_name(first), errno);
  Lane& l = *lane;
  lanes_.push_back(std::move(lane));  // finish() puts the original back
  for (int target : l.targets) {
    if (::dup2(own.get(), target) < 0) throw SysError("dup2", stdio_name(target), errno);
  }
}

std::string StdioRelay::lane_name(const Lane& lane) {
  return lane.targets.size() > 1 ? "standard output and error" : stdio_name(lane.targets.front());
}

bool StdioRelay::wait_for(int fd, short events) {
  pollfd p{fd, events, 0};
  const int n = ::poll(&p, 1, 100);
  return n != 0 || !finishing_.load();
}

bool StdioRelay::wait_for_room(int fd) {
  pollfd p[2] = {{fd, POLLOUT, 0}, {give_up_fd_.load(), POLLIN, 0}};
  const int n = ::poll(p, 2, 100);
  return !(n > 0 && (p[1].revents & POLLIN) && !(p[0].revents & (POLLOUT | POLLERR | POLLHUP)));
}

void StdioRelay::pump_output(Lane& lane) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(lane.ours.get(), buf, sizeof buf);
    if (n == 0) return;  // every writer is gone: the run is over
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return;
      if (!wait_for(lane.ours.get(), POLLIN)) return;
      continue;
    }
    // A file's cap (its RLIMIT_FSIZE); a socket has none (journald's streams).
    const uint64_t cap = lane.socket ? std::numeric_limits<uint64_t>::max() : max_output_bytes_;
    const uint64_t room = cap - std::min(cap, lane.copied);
    size_t length = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
    if (length < static_cast<size_t>(n) && lane.problem.empty())
      lane.problem = lane_name(lane) + ": the run's output past " + format_size(max_output_bytes_) +
                     " (its file size limit) was dropped";
    const int to = lane.writer ? lane.writer.get() : lane.original.get();
    for (size_t done = 0; done < length;) {
      // A socket is never made non-blocking: it is the caller's description.
      const ssize_t w = lane.socket ? ::send(to, buf + done, length - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                                    : ::write(to, buf + done, length - done);
      const int err = w < 0 ? errno : EIO;  // before wait_for_room's poll
      if (w < 0 && err == EINTR) continue;
      if (w < 0 && err == EAGAIN && wait_for_room(to)) continue;
      if (w < 0 && (err == EPIPE || err == ECONNRESET || err == ENOTCONN)) {
        // The reader is gone: so is the run's end of the lane, and the run's
        // next write fails (SIGPIPE) as it would have on the caller's.
        lane.problem = "writing the run's " + lane_name(lane) + ": " + std::strerror(err) + "; the run was told so";
        lane.ours.reset();
        return;
      }
      if (w <= 0) {
        lane.problem =
            "writing the run's " + lane_name(lane) + ": " +
            (err == EAGAIN ? std::string("its reader took no more by the run's time limit, or nsbox was told to stop")
                           : std::strerror(err)) +
            "; the rest was dropped";
        lane.copied = std::numeric_limits<uint64_t>::max();  // no room left, whatever the lane's cap
        length = done;
        break;
      }
      done += static_cast<size_t>(w);
    }
    lane.copied += length;
  }
}

void StdioRelay::pump_input(Lane& lane) {
  char buf[65536];
  for (;;) {
    // A terminal waits for the operator: look before reading, so that
    // finish() is not held up by a read.
    const int from = lane.reader ? lane.reader.get() : lane.original.get();
    if (!wait_for(from, POLLIN)) return;
    const ssize_t n = lane.socket       ? ::recv(from, buf, sizeof buf, MSG_DONTWAIT)
                      : lane.start >= 0 ? ::pread(from, buf, sizeof buf, lane.start + lane.relayed)
                                        : ::read(from, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // EIO: a terminal read from the background (SIGTTIN ignored): its end.
    if (n < 0 && errno != EIO)
      lane.problem = std::string("reading ") + stdio_name(0) + " for the run: " + std::strerror(errno);
    if (n <= 0) break;
    for (size_t done = 0; done < static_cast<size_t>(n);) {
      const ssize_t w = ::write(lane.ours.get(), buf + done, static_cast<size_t>(n) - done);
      if (w > 0) {
        done += static_cast<size_t>(w);
        lane.relayed += w;
      } else if (w < 0 && errno == EAGAIN) {
        if (!wait_for(lane.ours.get(), POLLOUT)) return;
      } else if (w >= 0 || errno != EINTR) {
        return;
      }
    }
  }
  lane.ours.reset();  // end of input for the run
}

std::vector<std::string> StdioRelay::finish(int give_up_fd) {
  std::vector<std::string> problems;
  if (finished_) return problems;
  finished_ = true;
  give_up_fd_ = give_up_fd;
  // Our own copies of the sandbox's ends close here; once the run's are
  // gone too, each pump sees the end of its stream.
  for (auto& lane : lanes_) {
    for (int target : lane->targets) ::dup2(lane->original.get(), target);
  }
  finishing_ = true;
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
    if (lane->flags_to_restore >= 0) ::fcntl(lane->original.get(), F_SETFL, lane->flags_to_restore);
    if (!lane->problem.empty()) problems.push_back(lane->problem);
    if (lane->input && lane->start >= 0) {
      // What the run did not read is still in the pipe: the caller's
      // offset moves past what it did read only.
      int unread = 0;
      if (::ioctl(lane->unread_probe.get(), FIONREAD, &unread) != 0) unread = 0;
      ::lseek(lane->original.get(), lane->start + lane->relayed - unread, SEEK_SET);
    }
  }
  return problems;
}

}  // namespace nsbox
