#include "nsbox/userns.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "nsbox/error.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_proc_file(const std::string& path, const std::string& content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw SysError("open", path, errno);
  ssize_t n = ::write(fd.get(), content.data(), content.size());
  if (n < 0) throw SysError("write", path, errno);
  if (static_cast<size_t>(n) != content.size()) throw SysError("write", path, EIO);
}

}  // namespace

bool find_subid_start(const std::string& contents, const std::string& user, unsigned long* start) {
  std::istringstream in(contents);
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    if (first == std::string::npos || line.substr(0, first) != user) continue;
    auto second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    try {
      size_t used = 0;
      std::string field = line.substr(first + 1, second - first - 1);
      unsigned long value = std::stoul(field, &used);
      if (used != field.size() || value == 0) continue;
      *start = value;
      return true;
    } catch (const std::exception&) {
      continue;
    }
  }
  return false;
}

HostIds choose_host_ids() {
  if (::geteuid() != 0) {
    return HostIds{::geteuid(), ::getegid(), "the invoking user's own uid/gid"};
  }
  HostIds ids{kDefaultHostId, kDefaultHostId, "built-in default (no nsbox entry in /etc/subuid)"};
  unsigned long uid_start = 0;
  unsigned long gid_start = 0;
  if (find_subid_start(read_small_file("/etc/subuid"), "nsbox", &uid_start) &&
      find_subid_start(read_small_file("/etc/subgid"), "nsbox", &gid_start)) {
    ids = HostIds{static_cast<uid_t>(uid_start), static_cast<gid_t>(gid_start),
                  "/etc/subuid and /etc/subgid entries of user nsbox"};
  }
  return ids;
}

std::string id_map_line(unsigned long inside, unsigned long host) {
  return std::to_string(inside) + " " + std::to_string(host) + " 1\n";
}

void write_id_maps(pid_t pid, uid_t inside_uid, gid_t inside_gid, const HostIds& host) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/";
  // Denying setgroups keeps the sandbox from dropping a group that a file
  // denies access to, and lets an unprivileged nsbox write gid_map at all.
  write_proc_file(dir + "setgroups", "deny");
  write_proc_file(dir + "uid_map", id_map_line(inside_uid, host.uid));
  write_proc_file(dir + "gid_map", id_map_line(inside_gid, host.gid));
}

std::vector<UserNsQuota> user_ns_quotas(uint64_t inotify_instances, uint64_t inotify_watches) {
  return {
      {"max_inotify_instances", inotify_instances},
      {"max_inotify_watches", inotify_watches},
      // Unprivileged fanotify (5.13 on) has no use in a run.
      {"max_fanotify_groups", 0},
      {"max_fanotify_marks", 0},
      // Under seccomp's namespace rules, a kernel bound of its own: a nested
      // user namespace is the way to capabilities the run does not have.
      {"max_user_namespaces", 0},
  };
}

int write_user_ns_quotas(const UserNsQuota* quotas, size_t count, const char** failed) noexcept {
  if (count == 0) return 0;
  *failed = "/proc/sys/user";
  // Without the directory nothing could be bounded: that is a failure.
  const int dir = ::open("/proc/sys/user", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return errno;
  int err = 0;
  for (size_t i = 0; i < count && err == 0; ++i) {
    *failed = quotas[i].name;
    const int fd = ::openat(dir, quotas[i].name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno != ENOENT) err = errno;
      continue;
    }
    char digits[24];
    size_t len = 0;
    uint64_t v = quotas[i].value;
    do digits[sizeof digits - 1 - len++] = static_cast<char>('0' + v % 10);
    while ((v /= 10) != 0);
    const ssize_t n = ::write(fd, digits + sizeof digits - len, len);
    if (n < 0)
      err = errno;
    else if (static_cast<size_t>(n) != len)
      err = EIO;
    ::close(fd);
  }
  ::close(dir);
  return err;
}

}  // namespace nsbox
