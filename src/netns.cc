#include "nsbox/netns.h"

#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nsbox {

int bring_up_loopback() noexcept {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  ifreq req{};
  std::memcpy(req.ifr_name, "lo", 3);
  int err = 0;
  if (::ioctl(fd, SIOCGIFFLAGS, &req) != 0) {
    err = errno;
  } else {
    req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &req) != 0) err = errno;
  }
  ::close(fd);
  return err;
}

int listen_on_loopback(uint16_t port) noexcept {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

}  // namespace nsbox
