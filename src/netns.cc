#include "nsbox/netns.h"

#include <net/if.h>
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

}  // namespace nsbox
