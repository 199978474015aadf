// Owning file descriptor: closed exactly once, never leaked across runs.
#pragma once

#include <unistd.h>

#include <utility>
#include <vector>

namespace nsbox {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// The descriptor numbers of fds, for a raw system call or a message.
inline std::vector<int> raw_fds(const std::vector<UniqueFd>& fds) {
  std::vector<int> out;
  out.reserve(fds.size());
  for (const auto& fd : fds) out.push_back(fd.get());
  return out;
}

// A pipe whose both ends are O_CLOEXEC; throws SysError on failure.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
  static Pipe create(int extra_flags = 0);
};

}  // namespace nsbox
