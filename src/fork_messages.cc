#include "nsbox/fork_messages.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "nsbox/child_report.h"
#include "nsbox/error.h"
#include "nsbox/fd_passing.h"
#include "nsbox/fork_server.h"
#include "nsbox/io.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// The setup failure a forked run's child reported, if any.
std::optional<ChildFailure> reported_failure(int error_fd) {
  ChildFailure failure{};
  if (readable_now(error_fd) && read_full(error_fd, &failure, sizeof failure) == sizeof failure) return failure;
  return std::nullopt;
}

}  // namespace

void send_with_fds(int sock, const std::string& text, const int* fds, size_t count, const char* what) {
  constexpr size_t kMaxFds = kForkRequestFds;
  if (count > kMaxFds) throw SysError(what, "more fds than a fork message carries", E2BIG);
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(kForkStepTimeoutMs);
  while (::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN || Clock::now() >= deadline) throw SysError("send", what, errno);
    pollfd p{sock, POLLOUT, 0};
    ::poll(&p, 1, ms_until(deadline));
  }
}

pid_t expect_from_fork(int sock, char tag, int error_fd, const char* what, UniqueFd* fd) {
  pollfd p{sock, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, kForkStepTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) throw SysError("fork server", std::string("no ") + what + " within 10 s", ETIMEDOUT);
  // One byte of tag, or an offer of an fd by its number (FdOffer); the
  // first descriptor it carried is the one expected, nothing else is.
  char buf[sizeof(FdOffer)] = {};
  pid_t pid = 0;
  int carried = -1;
  const ssize_t n = receive_with_credentials(sock, buf, sizeof buf, &pid, &carried);
  UniqueFd first(carried);
  const bool offer = n == static_cast<ssize_t>(sizeof(FdOffer)) && fd;
  if ((n != 1 && !offer) || buf[0] != tag) {
    first.reset();
    if (auto failure = reported_failure(error_fd)) throw SysError(failure->step, failure->object, failure->err);
    if (n > 0)
      throw SysError("fork server",
                     std::string("its run init sent '") + buf[0] + "' where '" + tag + "' (" + what +
                         ") was due: the rootfs and this nsbox are of different versions; rebuild the rootfs "
                         "(tools/build-rootfs, docs/OPERATIONS.md)",
                     EPROTO);
    throw SysError("fork server", std::string("ended before ") + what, n < 0 ? errno : EPIPE);
  }
  const auto without_credentials = [&] {
    return SysError("fork server", std::string(what) + " came without credentials", EPROTO);
  };
  if (offer) {
    first.reset();
    if (pid <= 0) throw without_credentials();
    FdOffer o{};
    std::memcpy(&o, buf, sizeof o);
    // Taken from the offering process (see offer_fd); where that cannot be
    // done, it is asked for and sent as a plain message next.
    const int taken = take_fd_from(pid, o.fd);
    if (taken < 0) {
      if (int err = answer_offer(sock, kFdSendIt)) throw SysError("fork server", std::string("answer ") + what, err);
      return expect_from_fork(sock, tag, error_fd, what, fd);
    }
    fd->reset(taken);
    if (int err = answer_offer(sock, kFdTaken)) throw SysError("fork server", std::string("answer ") + what, err);
    return pid;
  }
  if (fd) {
    if (!first) throw SysError("fork server", std::string(what) + " came without its fd", EPROTO);
    *fd = std::move(first);
  }
  if (pid <= 0) throw without_credentials();
  return pid;
}

}  // namespace nsbox
