#include "nsbox/fd_passing.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace nsbox {
namespace {

// A message of one tag byte with room for one fd.
struct FdMessage {
  char tag = 0;
  iovec iov{&tag, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};

  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

// A peer that closed its end with a message of ours unread makes our next
// receive fail once with ECONNRESET, even though what it sent before
// closing is still queued: look again, for that or for end of file.
bool retry_receive(int err) { return err == EINTR || err == ECONNRESET; }

// sendmsg, not send: an allow list lets a run hand over its listener when
// it names sendmsg (SeccompProgram::allow_list); the answer is read with
// read(), which every list names.
int send_bytes(int sock, const void* data, size_t size) noexcept {
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  ssize_t n;
  do n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  return n == static_cast<ssize_t>(size) ? 0 : EMSGSIZE;
}

}  // namespace

int send_fd(int sock, int fd, char tag) noexcept {
  FdMessage m;
  m.tag = tag;
  cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  while (::sendmsg(sock, &m.msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

int receive_fd(int sock, char* tag) noexcept {
  FdMessage m;
  ssize_t n;
  do n = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && retry_receive(errno));
  if (n == 0) errno = 0;  // EOF, as opposed to an error
  if (n <= 0) return -1;
  *tag = m.tag;
  cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
  if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) return -2;
  int fd;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  return fd;
}

int answer_offer(int sock, char answer) noexcept { return send_bytes(sock, &answer, 1); }

int take_fd_from(pid_t pid, int fd) noexcept {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  const int taken = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  const int err = errno;
  ::close(pidfd);
  errno = err;
  return taken;
}

int offer_fd(int sock, int fd, char tag) noexcept {
  const FdOffer offer{tag, fd};
  if (int err = send_bytes(sock, &offer, sizeof offer)) return err;
  char answer = 0;
  ssize_t n;
  do n = ::read(sock, &answer, 1);
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (n == 0) return EPIPE;
  if (answer == kFdTaken) return 0;
  if (answer == kFdSendIt) return send_fd(sock, fd, tag);
  return EPROTO;
}

ssize_t receive_with_credentials(int sock, void* buf, size_t len, pid_t* pid, int* fd) noexcept {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && retry_receive(errno));
  *pid = 0;
  *fd = -1;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); n > 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET) continue;
    if (cm->cmsg_type == SCM_CREDENTIALS) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(cm), sizeof cred);
      *pid = cred.pid;
    } else if (cm->cmsg_type == SCM_RIGHTS) {
      const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(cm) + i * sizeof(int), sizeof received);
        if (*fd < 0)
          *fd = received;
        else
          ::close(received);
      }
    }
  }
  return n;
}

int take_offered_fd(int sock, char* tag) noexcept {
  FdOffer offer{};
  pid_t pid = 0;
  int sent = -1;
  ssize_t n = receive_with_credentials(sock, &offer, sizeof offer, &pid, &sent);
  if (n == 0) errno = 0;
  if (n <= 0) return -1;
  *tag = offer.tag;
  if (n == 1) return sent >= 0 ? sent : (errno = EPROTO, -1);  // sent the old way
  if (sent >= 0) ::close(sent);
  if (n != sizeof offer || pid <= 0) {
    errno = EPROTO;
    return -1;
  }
  const int taken = take_fd_from(pid, offer.fd);
  if (taken >= 0) {
    if (int err = answer_offer(sock, kFdTaken)) {
      ::close(taken);
      errno = err;
      return -1;
    }
    return taken;
  }
  if (int err = answer_offer(sock, kFdSendIt)) {
    errno = err;
    return -1;
  }
  n = receive_with_credentials(sock, &offer, sizeof offer, &pid, &sent);
  if (n == 1 && offer.tag == *tag && sent >= 0) return sent;
  if (sent >= 0) ::close(sent);
  errno = n < 0 ? errno : EPROTO;
  return -1;
}

Pending pending_message(int sock) noexcept {
  for (;;) {
    char tag = 0;
    const ssize_t n = ::recv(sock, &tag, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return Pending::kMessage;
    if (n == 0) return Pending::kClosed;
    if (retry_receive(errno)) continue;
    return errno == EAGAIN ? Pending::kNothing : Pending::kClosed;
  }
}

}  // namespace nsbox
