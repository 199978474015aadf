#include "nsbox/io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "nsbox/error.h"

namespace nsbox {

OutputCapture::OutputCapture(UniqueFd fd, uint64_t cap) : fd_(std::move(fd)), cap_(cap) {}

namespace {

// Where output past the cap goes: the process's one /dev/null, opened on
// first use (-1 if it cannot be: the output is then read and dropped).
int dev_null() {
  static const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  return fd;
}

constexpr int kDiscardPipeBytes = 1 << 20;
constexpr int kDiscardWakesPerPace = 16;
// A read below the cap this short counts against the pace: a pipe read
// while a byte-at-a-time writer fills it is one of these.
constexpr ssize_t kSmallRead = 4096;

// Moves what a pipe holds to /dev/null without copying it through this
// process. Returns what splice(2) does; -1 with EINVAL for a source that is
// not a pipe.
ssize_t discard(int fd) {
  const int null_fd = dev_null();
  if (null_fd < 0) {
    errno = EINVAL;
    return -1;
  }
  return ::splice(fd, nullptr, null_fd, nullptr, size_t{1} << 20, SPLICE_F_NONBLOCK);
}

}  // namespace

// A pace window takes up to a full pipe's worth (kDiscardPipeBytes) or
// kDiscardWakesPerPace drops, then the fd rests until the window ends: the
// same bytes a second when the pipe could not be made larger (a small one
// takes more drops), and nsbox's cost bounded either way.
void OutputCapture::pace_discarding(ssize_t discarded) {
  if (window_full(discarded > 0 ? static_cast<uint64_t>(discarded) : 0)) rest_until_ = window_end_;
}

void OutputCapture::pace_small_reads(ssize_t n) {
  if (n >= kSmallRead || !window_full(0)) return;
  rest_until_ = window_end_;
  // A larger pipe keeps a writer of small pieces from waiting for the
  // rest to end (its pages are the writer's, charged to the run).
  if (!pipe_enlarged_) ::fcntl(fd_.get(), F_SETPIPE_SZ, kDiscardPipeBytes);
  pipe_enlarged_ = true;
}

// Counts one wake and its bytes in the current pace window (a new one once
// it has ended); true when the window has had its share.
bool OutputCapture::window_full(uint64_t bytes) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= window_end_) {
    window_end_ = now + kDiscardPace;
    window_bytes_ = 0;
    window_wakes_ = 0;
  }
  window_bytes_ += bytes;
  return window_bytes_ >= static_cast<uint64_t>(kDiscardPipeBytes) || ++window_wakes_ >= kDiscardWakesPerPace;
}

void OutputCapture::on_readable() {
  if (truncated_) {
    const ssize_t n = discard(fd_.get());
    if (n == 0) fd_.reset();
    pace_discarding(n);
    if (n >= 0 || errno == EINTR || errno == EAGAIN) return;
    if (errno != EINVAL) throw SysError("splice", "sandbox output", errno);
  }
  char buf[65536];
  ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return;
    throw SysError("read", "sandbox output", errno);
  }
  if (n == 0) {
    fd_.reset();
    return;
  }
  pace_small_reads(n);
  const uint64_t room = cap_ > data_.size() ? cap_ - data_.size() : 0;
  const size_t keep = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
  data_.append(buf, keep);
  if (keep < static_cast<size_t>(n)) {
    truncated_ = true;
    // Each paced drop empties the pipe: a larger one keeps a program that
    // merely prints a lot past the cap from waiting long for it (its pages
    // are the writer's, charged to the run). Best effort.
    ::fcntl(fd_.get(), F_SETPIPE_SZ, kDiscardPipeBytes);
  }
}

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

int ms_until(std::chrono::steady_clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, INT32_MAX));
}

size_t read_full(int fd, void* buf, size_t size) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SysError("read", "sandbox report pipe", errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void write_full(int fd, std::string_view data, const char* step, const char* object) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw SysError(step, object, n < 0 ? errno : EPIPE);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

bool write_full_before(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline, const char* step,
                       const char* object) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != EAGAIN) throw SysError(step, object, n < 0 ? errno : EPIPE);
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) == 0) return false;
  }
  return true;
}

std::string resolved_or_as_is(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

}  // namespace nsbox
