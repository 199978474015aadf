#include <fcntl.h>
#include <unistd.h>

#include "nsbox/cli.h"

namespace {

// A closed stdio fd would be reused by the first pipe nsbox opens and then
// confused with the sandbox's stdio.
void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) {
      int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) ::dup2(null_fd, fd), ::close(null_fd);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_stdio_open();
  return nsbox::cli_main(argc, argv);
}
