// Detection of the host's cgroups and the parts common to v1 and v2.
#include "nsbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cgroup_internal.h"
#include "nsbox/error.h"
#include "nsbox/mounts.h"
#include "nsbox/proc_stat.h"

namespace nsbox {

namespace cgroup_internal {

bool try_read_at(int dir, const char* name, std::string* out) {
  UniqueFd fd(::openat(dir, name, O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n == 0) return true;
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
    } else if (errno != EINTR) {
      return false;
    }
  }
}

void write_at(int dir, const char* name, const std::string& value, const std::string& dir_path) {
  // The error names dir_path/name, built only when there is one.
  auto shown = [&] { return dir_path.empty() ? std::string(name) : dir_path + "/" + name; };
  UniqueFd fd(::openat(dir, name, O_WRONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    throw SysError("open", shown(), err);
  }
  if (::write(fd.get(), value.data(), value.size()) < 0) {
    const int err = errno;
    throw SysError("write " + value + " to", shown(), err);
  }
}

std::string read_text(const std::string& path) {
  std::string text;
  try_read_text(path, &text);
  return text;
}

bool try_read_text(const std::string& path, std::string* out) { return try_read_at(AT_FDCWD, path.c_str(), out); }

void write_text(const std::string& path, const std::string& value) { write_at(AT_FDCWD, path.c_str(), value, ""); }

// "key value" lines (memory.events, pids.events, cpu.stat, oom_control).
int64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

int64_t number_value(const std::string& text) {
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<pid_t> pid_list(const std::string& text) {
  std::vector<pid_t> pids;
  std::istringstream in(text);
  pid_t pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

int64_t read_keyed(const std::string& path, const std::string& key) {
  std::string text;
  return try_read_text(path, &text) ? keyed_value(text, key) : -1;
}

int64_t read_number(const std::string& path) {
  std::string text;
  return try_read_text(path, &text) ? number_value(text) : -1;
}

CgroupDir CgroupDir::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    throw SysError("open", path, err);
  }
  return CgroupDir{path, std::move(fd)};
}

void CgroupDir::write(const char* name, const std::string& value) const { write_at(fd.get(), name, value, path); }

bool CgroupDir::has(const char* name) const { return ::faccessat(fd.get(), name, F_OK, 0) == 0; }

int64_t CgroupDir::number(const char* name) const {
  std::string text;
  return try_read_at(fd.get(), name, &text) ? number_value(text) : -1;
}

int64_t CgroupDir::keyed(const char* name, const std::string& key) const {
  std::string text;
  return try_read_at(fd.get(), name, &text) ? keyed_value(text, key) : -1;
}

std::vector<pid_t> CgroupDir::members() const {
  std::string text;
  return try_read_at(fd.get(), "cgroup.procs", &text) ? pid_list(text) : std::vector<pid_t>{};
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw SysError("mkdir", path, errno);
}

std::vector<pid_t> read_pids(const std::string& procs_file) { return pid_list(read_text(procs_file)); }

std::vector<std::string> list_subdirs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  return out;
}

// The boottime offset of this process's time namespace, in clock ticks
// (/proc/self/timens_offsets; 0 on the host's, or on a kernel without time
// namespaces).
long long own_boottime_offset_ticks() {
  static const long long ticks = [] {
    std::string text;
    if (!try_read_text("/proc/self/timens_offsets", &text)) return 0LL;
    const long long hz = ::sysconf(_SC_CLK_TCK);
    std::istringstream in(text);
    std::string clock;
    long long seconds = 0, nanoseconds = 0;
    while (in >> clock >> seconds >> nanoseconds)
      if (clock == "boottime" || clock == "7") return seconds * hz + nanoseconds * hz / 1000000000;
    return 0LL;
  }();
  return ticks;
}

// Field 22 of /proc/<pid>/stat: the process's start time, which tells a live
// process from a new one that reused its pid. The kernel shows it moved by
// the reader's time namespace: it is taken back to the host's clock, so that
// an nsbox in a time namespace of its own (a restored container's, say)
// names its runs' owners as every other nsbox reads them, and does not take
// a live owner for a dead one and sweep its runs.
std::string process_start_time(pid_t pid) {
  const std::string shown = proc_stat_field(pid, 22);
  const long long offset = own_boottime_offset_ticks();
  if (offset == 0 || shown.empty()) return shown;
  try {
    return std::to_string(std::stoll(shown) - offset);
  } catch (const std::exception&) {
    return shown;
  }
}

// Whether two start times (process_start_time) are one process's. Taken
// back from a time namespace whose offset is not whole ticks, one may be a
// tick off the other; a pid is not reused within a tick of its last start.
bool same_start_time(const std::string& a, const std::string& b) {
  if (a == b) return true;
  try {
    const long long difference = std::stoll(a) - std::stoll(b);
    return difference >= -1 && difference <= 1;
  } catch (const std::exception&) {
    return false;
  }
}

std::map<std::string, std::string> cgroup_paths_of(pid_t pid) {
  // "0::/path" (v2) and "N:ctrl1,ctrl2:/path" (v1).
  std::map<std::string, std::string> paths;
  std::string text;
  if (!try_read_text(pid ? "/proc/" + std::to_string(pid) + "/cgroup" : "/proc/self/cgroup", &text)) return paths;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      paths[""] = path;
      continue;
    }
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) paths[c] = path;
  }
  return paths;
}

bool ends_with_dir(const std::string& cgroup_path, const std::string& dir) {
  const size_t name = dir.rfind('/');
  const size_t parent = name == std::string::npos || name == 0 ? std::string::npos : dir.rfind('/', name - 1);
  if (parent == std::string::npos) return false;
  const std::string tail = dir.substr(parent);  // "/nsbox/run-..."
  return cgroup_path.size() >= tail.size() &&
         cgroup_path.compare(cgroup_path.size() - tail.size(), tail.size(), tail) == 0;
}

std::string own_pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? std::to_string(st.st_ino) : "0";
}

namespace {

// The host's first pid namespace (the kernel's PROC_PID_INIT_INO): from
// it, every process of every pid namespace is in /proc.
constexpr ino_t kInitPidNamespace = 0xEFFFFFFCU;

// Every process in this /proc by the inode of its pid namespace; one
// listing serves a second of a sweep's live names (it asks for each run
// name it finds).
struct PidNamespaces {
  std::map<std::string, std::vector<std::string>> pids;  // namespace inode -> /proc entries
  std::vector<std::string> unreadable;                   // processes whose namespace cannot be told
  bool listed = false;
  std::chrono::steady_clock::time_point taken;
};

PidNamespaces take_pid_namespaces() {
  PidNamespaces out;
  out.taken = std::chrono::steady_clock::now();
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  out.listed = true;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    struct stat st {};
    if (::stat((std::string("/proc/") + e->d_name + "/ns/pid").c_str(), &st) == 0)
      out.pids[std::to_string(st.st_ino)].emplace_back(e->d_name);
    else if (errno != ENOENT && errno != ESRCH)
      out.unreadable.emplace_back(e->d_name);  // e.g. one root may not trace
  }
  ::closedir(proc);
  return out;
}

// The last NSpid of /proc/PID/status: its pid in its own namespace.
std::string innermost_pid(const std::string& proc_pid) {
  std::string text;
  if (!try_read_text("/proc/" + proc_pid + "/status", &text)) return "";
  const size_t at = text.find("\nNSpid:");
  if (at == std::string::npos) return "";
  const std::string line = text.substr(at + 7, text.find('\n', at + 1) - at - 7);
  const size_t last = line.find_last_of(" \t");
  return last == std::string::npos ? line : line.substr(last + 1);
}

// A run of another pid namespace: its pid and start time name a process
// of that namespace, which this one finds by its NSpid (a namespace's
// inode is soon reused, so the namespace alone proves nothing). Only from
// the host's first pid namespace, which sees every process, is a run whose
// owner is not found taken for a dead one's; otherwise it is left to an
// nsbox of its own. A process whose namespace cannot be read counts as
// the owner when its NSpid and start time are the owner's.
bool other_namespace_run_alive(const std::string& ns, const std::string& pid, const std::string& start) {
  struct stat own {};
  if (ns == "0" || ::stat("/proc/self/ns/pid", &own) != 0 || own.st_ino != kInitPidNamespace) return true;
  static std::mutex mutex;
  static PidNamespaces seen;
  std::lock_guard<std::mutex> lock(mutex);
  const auto is_owner = [&](const std::string& p) {
    return innermost_pid(p) == pid && same_start_time(process_start_time(static_cast<pid_t>(std::stol(p))), start);
  };
  const auto owner_seen = [&] {
    if (!seen.listed) return true;
    if (std::any_of(seen.unreadable.begin(), seen.unreadable.end(), is_owner)) return true;
    const auto members = seen.pids.find(ns);
    return members != seen.pids.end() && std::any_of(members->second.begin(), members->second.end(), is_owner);
  };
  if (std::chrono::steady_clock::now() - seen.taken < std::chrono::seconds(1) && owner_seen()) return true;
  // Dead is decided only on a listing taken after the run's name was
  // found: an older one would miss a run started since.
  seen = take_pid_namespaces();
  return owner_seen();
}

}  // namespace

bool run_owner_alive(const std::string& run_name) {
  // run-<pid>-<starttime>-<n>-p<pid namespace>[-<random>] (no p field:
  // made by an nsbox before the field was added).
  std::istringstream in(run_name);
  std::string prefix, pid_text, start, n, ns;
  if (!std::getline(in, prefix, '-') || prefix != "run") return true;  // not ours: keep
  if (!std::getline(in, pid_text, '-') || !std::getline(in, start, '-')) return true;
  // The pid and start time are those of the owner's pid namespace.
  if (std::getline(in, n, '-') && std::getline(in, ns, '-') && ns.size() > 1 && ns[0] == 'p' &&
      ns.find_first_not_of("0123456789", 1) == std::string::npos && ns.substr(1) != own_pid_namespace())
    return other_namespace_run_alive(ns.substr(1), pid_text, start);
  pid_t pid = 0;
  try {
    pid = static_cast<pid_t>(std::stol(pid_text));
  } catch (const std::exception&) {
    return true;
  }
  return same_start_time(process_start_time(pid), start);
}

bool remove_when_empty(const std::string& dir, std::chrono::milliseconds wait) {
  constexpr auto kStep = std::chrono::milliseconds(2);
  for (auto waited = std::chrono::milliseconds(0);; waited += kStep) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY) return false;
    if (waited >= wait) return false;
    std::this_thread::sleep_for(kStep);
    // Unreadable once another sweep removed it: the next rmdir says ENOENT.
    std::string procs;
    if (try_read_text(dir + "/cgroup.procs", &procs))
      for (pid_t pid : pid_list(procs)) ::kill(pid, SIGKILL);
  }
}

namespace {
std::atomic<bool> left_behind{false};
}  // namespace

void note_run_cgroup_left_behind() { left_behind = true; }

}  // namespace cgroup_internal

using namespace cgroup_internal;

namespace {

struct MountEntry {
  std::string mount_point;
  std::string root;  // the cgroup path mounted there
  std::string fstype;
  std::string super_options;
};

std::vector<MountEntry> cgroup_mounts() {
  std::vector<MountEntry> out;
  std::istringstream in(read_text("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (dash == f.end() || f.size() < 5 || dash + 3 >= f.end()) continue;
    const std::string& fstype = *(dash + 1);
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    out.push_back({unescape_mountinfo(f[4]), unescape_mountinfo(f[3]), fstype, *(dash + 3)});
  }
  return out;
}

std::set<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

// "/sys/fs/cgroup/memory" + "/process_api/x" relative to the mount's root.
std::string join_cgroup_path(const MountEntry& m, const std::string& cgroup_path) {
  std::string rel = cgroup_path;
  if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
  if (rel == "/") rel.clear();
  return m.mount_point + rel;
}

// nsbox's processes that moved into their own cgroup's supervisor leaf
// (move_into_supervisor_leaf) make their runs beside it.
std::string without_supervisor_leaf(const std::string& v2_path) {
  const std::string leaf = std::string("/") + kSupervisorLeaf;
  if (v2_path.size() > leaf.size() && v2_path.ends_with(leaf)) return v2_path.substr(0, v2_path.size() - leaf.size());
  return v2_path;
}

}  // namespace

CgroupHost CgroupHost::detect(const std::string& v2_parent_override) {
  CgroupHost host;
  std::map<std::string, std::string> v1_paths = cgroup_paths_of(0);
  const std::string v2_path = without_supervisor_leaf(v1_paths[""]);
  v1_paths.erase("");
  for (const auto& m : cgroup_mounts()) {
    if (m.fstype == "cgroup2") {
      if (host.v2_mount) continue;
      host.v2_mount = m.mount_point;
      host.v2_self_dir = v2_parent_override.empty() ? join_cgroup_path(m, v2_path) : v2_parent_override;
      host.v2_controllers = split_words(read_text(host.v2_self_dir + "/cgroup.controllers"));
      std::string root;
      if (try_read_text(m.mount_point + "/cgroup.controllers", &root)) host.v2_root_controllers = split_words(root);
      continue;
    }
    for (const auto& opt : split_words([&] {
           std::string s = m.super_options;
           std::replace(s.begin(), s.end(), ',', ' ');
           return s;
         }())) {
      if (v1_paths.count(opt) && !host.v1_self_dirs.count(opt))
        host.v1_self_dirs[opt] = join_cgroup_path(m, v1_paths[opt]);
    }
  }
  return host;
}

std::set<std::string> controllers_for(const CgroupLimits& limits) {
  std::set<std::string> out;
  if (limits.memory_bytes) out.insert("memory");
  if (limits.cpus > 0) out.insert("cpu");
  if (limits.pids) out.insert("pids");
  return out;
}

std::string cgroup_parent_problem(const std::string& parent, const CgroupLimits& limits) {
  if (parent.empty() || parent[0] != '/') return parent + ": expected an absolute path";
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0) return parent + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return parent + ": " + std::strerror(ENOTDIR);
  struct statfs fs {};
  if (::statfs(parent.c_str(), &fs) != 0) return parent + ": " + std::strerror(errno);
  if (fs.f_type != CGROUP2_SUPER_MAGIC) return parent + ": not a directory of the cgroup v2 file system";
  std::set<std::string> needed = controllers_for(limits);
  if (needed.empty()) needed = {"memory", "cpu", "pids"};
  // (With no controller in either version the launcher refuses the run
  // itself, naming what is missing.)
  if (CgroupHost::detect(parent).choose(needed) == "v1")
    return parent + ": this host enforces the run's limits through cgroup v1, where a cgroup v2 parent does not apply";
  return "";
}

namespace {

size_t count_present(const std::set<std::string>& needed, const std::set<std::string>& have) {
  return static_cast<size_t>(
      std::count_if(needed.begin(), needed.end(), [&](const std::string& c) { return have.count(c); }));
}

std::set<std::string> v1_controllers(const CgroupHost& host) {
  std::set<std::string> out;
  for (const auto& [c, dir] : host.v1_self_dirs) out.insert(c);
  return out;
}

}  // namespace

std::string CgroupHost::choose(const std::set<std::string>& needed) const {
  const size_t v2 = v2_mount ? count_present(needed, v2_controllers) : 0;
  const size_t v1 = count_present(needed, v1_controllers(*this));
  if (v2_mount && v2 == needed.size()) return "v2";
  if (v1 == needed.size() && !v1_self_dirs.empty()) return "v1";
  if (v2 == 0 && v1 == 0) return {};
  return v2 >= v1 ? "v2" : "v1";
}

std::set<std::string> CgroupHost::missing(const std::set<std::string>& needed) const {
  const std::string version = choose(needed);
  const std::set<std::string> have = version == "v2"   ? v2_controllers
                                     : version == "v1" ? v1_controllers(*this)
                                                       : std::set<std::string>{};
  std::set<std::string> out;
  for (const auto& c : needed)
    if (!have.count(c)) out.insert(c);
  return out;
}

std::string next_run_cgroup_name() {
  // Recomputed after a fork: the node's workers are forked from one spawner
  // and must not share its owner name (and counter).
  static pid_t owner_pid = 0;
  static std::string owner;
  static std::string pid_namespace;
  static unsigned long counter = 0;
  if (owner_pid != ::getpid()) {
    owner_pid = ::getpid();
    owner = std::to_string(owner_pid) + "-" + process_start_time(owner_pid);
    pid_namespace = "p" + own_pid_namespace();
    counter = 0;
  }
  return "run-" + owner + "-" + std::to_string(++counter) + "-" + pid_namespace;
}

std::unique_ptr<RunCgroup> create_run_cgroup(const CgroupHost& host, const std::string& version,
                                             const CgroupLimits& limits, const std::string& run_name) {
  if (version == "v2") return create_v2_run_cgroup(host, limits, run_name);
  if (version == "v1") return create_v1_run_cgroup(host, limits, run_name);
  throw SysError("cgroup", "no usable cgroup hierarchy", ENOENT);
}

StaleSweep remove_stale_run_cgroups(const CgroupHost& host, std::chrono::milliseconds wait) {
  StaleSweep sweep;
  remove_stale_v2(host, wait, sweep);
  remove_stale_v1(host, wait, sweep);
  return sweep;
}

bool run_cgroup_left_behind() { return left_behind; }

namespace {

// nsbox's own cgroup directories that hold a run parent: v2 and the v1
// hierarchies runs join.
std::set<std::string> own_dirs(const CgroupHost& host) {
  std::set<std::string> dirs;
  if (host.v2_mount) dirs.insert(host.v2_self_dir);
  for (const char* controller : kV1Controllers)
    if (auto it = host.v1_self_dirs.find(controller); it != host.v1_self_dirs.end()) dirs.insert(it->second);
  return dirs;
}

// A flock of a cgroup directory taken at once or not at all (then empty):
// anyone who can open the directory can flock it, and a lock another user
// holds must not stall nsbox.
UniqueFd try_lock_dir(const std::string& dir, int operation) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd && ::flock(fd.get(), operation | LOCK_NB) != 0) fd.reset();
  return fd;
}

}  // namespace

void remove_empty_run_parents(const CgroupHost& host) noexcept {
  for (const auto& own : own_dirs(host)) {
    // rmdir fails (EBUSY) while any nsbox still has a run there. Without
    // the lock (a creator is between making the parent and its run, or
    // another user holds it) the parent is left.
    if (UniqueFd lock = try_lock_dir(own, LOCK_EX)) ::rmdir((own + "/" + kParentName).c_str());
  }
}

namespace cgroup_internal {

void make_in_run_parent(const std::string& own_dir, const std::function<void()>& make_run) {
  for (int attempt = 0;; ++attempt) {
    try {
      make_run();  // the parent is there but for the first run and after a removal
      return;
    } catch (const SysError& e) {
      // ENODEV: the parent is being removed.
      if ((e.err() != ENOENT && e.err() != ENODEV) || attempt == kParentGoneRetries) throw;
    }
    // Under a shared lock no removal comes between the parent and the run;
    // when the lock cannot be had at once, the next attempt tries again.
    const UniqueFd lock = try_lock_dir(own_dir, LOCK_SH);
    make_dir(own_dir + "/" + kParentName);
    if (lock) {
      make_run();
      return;
    }
  }
}

}  // namespace cgroup_internal

}  // namespace nsbox
