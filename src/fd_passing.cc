#include "nsbox/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
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
