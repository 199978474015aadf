#include "nsbox/terminal_modes.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace nsbox {

namespace {

dev_t device_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_rdev : 0;
}

bool same_modes(const termios& a, const termios& b) {
  return a.c_iflag == b.c_iflag && a.c_oflag == b.c_oflag && a.c_cflag == b.c_cflag && a.c_lflag == b.c_lflag &&
         std::memcmp(a.c_cc, b.c_cc, sizeof a.c_cc) == 0 && ::cfgetispeed(&a) == ::cfgetispeed(&b) &&
         ::cfgetospeed(&a) == ::cfgetospeed(&b);
}

// Whether nsbox is a background job of the terminal of fd (its controlling
// terminal, whose foreground group is another). Not its controlling
// terminal: no job owns it but us.
bool in_background_of(int fd) {
  const pid_t foreground = ::tcgetpgrp(fd);
  return foreground > 0 && foreground != ::getpgrp();
}

}  // namespace

TerminalModes::TerminalModes() {
  std::vector<dev_t> seen;
  for (int fd = 0; fd <= 2; ++fd) {
    if (!::isatty(fd)) continue;
    const dev_t device = device_of(fd);
    if (std::find(seen.begin(), seen.end(), device) != seen.end()) continue;
    Saved saved;
    saved.fd.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    if (!saved.fd || ::tcgetattr(saved.fd.get(), &saved.modes) != 0) continue;
    if (::ioctl(saved.fd.get(), TIOCGEXCL, &saved.exclusive) != 0) saved.exclusive = 0;
    if (::ioctl(saved.fd.get(), TIOCGETD, &saved.discipline) != 0) saved.discipline = N_TTY;
    seen.push_back(device);
    saved_.push_back(std::move(saved));
  }
}

void TerminalModes::restore() {
  for (Saved& saved : saved_) {
    const int fd = saved.fd.get();
    // What leaves the terminal unusable is undone whoever is in front:
    // another discipline (its modes cannot even be read), exclusive mode,
    // stopped output (every later write to it would wait, the shell's too).
    int discipline = N_TTY;
    if (::ioctl(fd, TIOCGETD, &discipline) == 0 && discipline != saved.discipline)
      ::ioctl(fd, TIOCSETD, &saved.discipline);
    int exclusive = 0;
    if (::ioctl(fd, TIOCGEXCL, &exclusive) == 0 && exclusive != saved.exclusive)
      ::ioctl(fd, saved.exclusive ? TIOCEXCL : TIOCNXCL);
    ::tcflow(fd, TCOON);
    if (in_background_of(fd)) continue;
    termios now{};
    if (::tcgetattr(fd, &now) == 0 && !same_modes(now, saved.modes)) ::tcsetattr(fd, TCSANOW, &saved.modes);
  }
  saved_.clear();
}

}  // namespace nsbox
