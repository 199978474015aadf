#include "nsbox/io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "nsbox/error.h"

namespace nsbox {

OutputCapture::OutputCapture(UniqueFd fd, uint64_t cap) : fd_(std::move(fd)), cap_(cap) {}

void OutputCapture::on_readable() {
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
  const uint64_t room = cap_ > data_.size() ? cap_ - data_.size() : 0;
  const size_t keep = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
  data_.append(buf, keep);
  if (keep < static_cast<size_t>(n)) truncated_ = true;
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

}  // namespace nsbox
