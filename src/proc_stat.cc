// Fields of /proc/PID/stat, read with one read(2): the file is produced whole.
#include "nsbox/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

#include "nsbox/unique_fd.h"

namespace nsbox {

std::string proc_stat_field(pid_t pid, int n) {
  const std::string path = pid ? "/proc/" + std::to_string(pid) + "/stat" : "/proc/self/stat";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || n < 3) return {};
  char buf[4096];
  const ssize_t len = ::read(fd.get(), buf, sizeof buf);
  if (len <= 0) return {};
  const std::string stat(buf, static_cast<size_t>(len));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= n; ++i) {
    if (!(fields >> field)) return {};
  }
  return field;
}

}  // namespace nsbox
