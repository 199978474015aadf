// A time namespace of the run's own. Without one, a run's CLOCK_MONOTONIC,
// CLOCK_BOOTTIME, /proc/uptime and /proc/stat's btime are the host's: how
// long the host has been up, and so which kernel fixes it cannot have yet.
// In its own they count from about the run's start. Relative times
// (timeouts, sleeps, what code measures) are unchanged; CLOCK_REALTIME is
// never namespaced. A fork server's runs keep the fork server's namespace:
// a clock that went back under the runtime it copies would break it (Node
// aborts when its loop's time is behind its timers' base).
#include "nsbox/timens.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <ctime>

namespace nsbox {
namespace {

// What the new namespace's clocks read when it is made: far enough above 0
// that PID 1's own start time, taken a moment before, is not negative in it
// (/proc would show it wrapped around).
constexpr long long kStartSeconds = 1;

// Reads the whole of a small file into buf (NUL-terminated); its length,
// or -1 with errno.
ssize_t read_small_file(const char* path, char* buf, size_t size) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  while (len + 1 < size) {
    const ssize_t n = ::read(fd, buf + len, size - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[len] = '\0';
  return static_cast<ssize_t>(len);
}

// The seconds of clock's line in /proc/self/timens_offsets ("monotonic 0 0",
// "boottime 0 0"): the offsets of the namespace this process's children
// start in, which before the unshare below is the one it is in (nsbox's own,
// 0 unless nsbox itself runs in a time namespace).
int offset_seconds(const char* text, const char* name, long long* seconds) noexcept {
  size_t name_len = 0;
  while (name[name_len] != '\0') ++name_len;
  for (const char* line = text; *line != '\0';) {
    size_t i = 0;
    while (i < name_len && line[i] == name[i]) ++i;
    if (i == name_len && (line[i] == ' ' || line[i] == '\t')) {
      const char* p = line + i;
      while (*p == ' ' || *p == '\t') ++p;
      const bool negative = *p == '-';
      if (negative) ++p;
      if (*p < '0' || *p > '9') return EPROTO;
      long long v = 0;
      while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
      *seconds = negative ? -v : v;
      return 0;
    }
    while (*line != '\0' && *line != '\n') ++line;
    if (*line != '\0') ++line;
  }
  return EPROTO;
}

// Appends "<clock id> <seconds> 0\n" at out, which has room for 32 bytes;
// returns its length. The kernel takes clock ids as numbers on every
// version (names only since 5.7).
size_t format_offset(char* out, clockid_t clock, long long seconds) noexcept {
  size_t len = 0;
  out[len++] = static_cast<char>('0' + clock);  // CLOCK_MONOTONIC 1, CLOCK_BOOTTIME 7
  out[len++] = ' ';
  if (seconds < 0) out[len++] = '-';
  unsigned long long v = static_cast<unsigned long long>(seconds < 0 ? -seconds : seconds);
  char digits[24];
  size_t n = 0;
  do digits[n++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0) out[len++] = digits[--n];
  out[len++] = ' ';
  out[len++] = '0';
  out[len++] = '\n';
  return len;
}

}  // namespace

int enter_own_time_namespace(const char** step) noexcept {
  char current[256];
  *step = "read /proc/self/timens_offsets";
  if (read_small_file("/proc/self/timens_offsets", current, sizeof current) < 0) return errno;
  long long monotonic_offset = 0, boottime_offset = 0;
  int err = offset_seconds(current, "monotonic", &monotonic_offset);
  if (err == 0) err = offset_seconds(current, "boottime", &boottime_offset);
  if (err != 0) return err;
  timespec monotonic{}, boottime{};
  *step = "clock_gettime";
  if (::clock_gettime(CLOCK_MONOTONIC, &monotonic) != 0 || ::clock_gettime(CLOCK_BOOTTIME, &boottime) != 0)
    return errno;

  *step = "unshare";
  if (::unshare(CLONE_NEWTIME) != 0) return errno;
  // An offset is from the host's clock to the namespace's, whichever
  // namespace writes it: the one this process reads plus its own offset.
  char text[64];
  size_t len = format_offset(text, CLOCK_MONOTONIC, monotonic_offset - monotonic.tv_sec + kStartSeconds);
  len += format_offset(text + len, CLOCK_BOOTTIME, boottime_offset - boottime.tv_sec + kStartSeconds);
  *step = "write /proc/self/timens_offsets";
  int fd = ::open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t written = ::write(fd, text, len);
  err = written < 0 ? errno : static_cast<size_t>(written) != len ? EIO : 0;
  ::close(fd);
  if (err != 0) return err;

  *step = "setns time_for_children";
  fd = ::open("/proc/self/ns/time_for_children", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  err = ::setns(fd, CLONE_NEWTIME) != 0 ? errno : 0;
  ::close(fd);
  return err;
}

}  // namespace nsbox
