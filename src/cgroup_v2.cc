// cgroup v2: a leaf per run under <nsbox's cgroup>/nsbox, joined atomically
// with clone3(CLONE_INTO_CGROUP), killed with cgroup.kill.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "cgroup_internal.h"
#include "nsbox/error.h"
#include "nsbox/unique_fd.h"

namespace nsbox {

using namespace cgroup_internal;

namespace {

// Moves processes (nsbox's own) into dir's leaf for them.
void join_supervisor_leaf(const std::string& dir, const std::vector<pid_t>& pids) {
  const std::string leaf = dir + "/" + kSupervisorLeaf;
  make_dir(leaf);
  for (pid_t pid : pids) write_text(leaf + "/cgroup.procs", std::to_string(pid));
}

// The refusal when processes other than nsbox's share its cgroup.
SysError shared_cgroup_error(const std::string& control, const std::string& controllers, const std::string& others) {
  return SysError("enable " + controllers + " in",
                  control + " (other processes share nsbox's cgroup" + (others.empty() ? "" : ": pids " + others) +
                      "; start nsbox in a cgroup of its own: "
                      "`systemd-run --scope -p Delegate=yes nsbox ...`, a systemd unit with Delegate=yes, "
                      "or --cgroup-parent)",
                  EBUSY);
}

// The processes of dir other than ours, as "1, 2, 3" (at most 5).
std::string other_members(const std::string& dir, const std::vector<pid_t>& ours) {
  std::string out;
  int listed = 0;
  for (pid_t pid : read_pids(dir + "/cgroup.procs")) {
    if (std::find(ours.begin(), ours.end(), pid) != ours.end()) continue;
    if (++listed > 5) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(pid);
  }
  return out;
}

// Enables controllers for the children of dir. A cgroup that holds processes
// may not enable them (the no-internal-processes rule): nsbox then moves
// itself into its leaf (kSupervisorLeaf) first. Other programs' processes
// are never moved: if they share nsbox's cgroup, this fails with a clear
// message, and nsbox stays where it is (it makes no leaf for nothing).
void enable_controllers(const std::string& dir, const std::string& controllers) {
  const std::string control = dir + "/cgroup.subtree_control";
  try {
    write_text(control, controllers);
    return;
  } catch (const SysError& e) {
    if (e.err() != EBUSY) throw;
  }
  if (const std::string others = other_members(dir, {::getpid()}); !others.empty())
    throw shared_cgroup_error(control, controllers, others);
  join_supervisor_leaf(dir, {::getpid()});
  try {
    write_text(control, controllers);
  } catch (const SysError& e) {
    if (e.err() != EBUSY) throw;
    throw shared_cgroup_error(control, controllers, "");  // one came in meanwhile
  }
}

std::string controller_list(const CgroupLimits& limits) {
  std::string out;
  for (const auto& c : controllers_for(limits)) out += (out.empty() ? "+" : " +") + c;
  return out;
}

// Kills everything in dir, waits up to `wait` until it is empty and removes
// it. False when it is still there.
bool destroy(const std::string& dir, std::chrono::milliseconds wait = kRunCgroupEmptyWait) {
  try {
    write_text(dir + "/cgroup.kill", "1");
  } catch (const SysError&) {
    // Kernels before 5.14 lack cgroup.kill (remove_when_empty signals each
    // member), and another sweep may have removed it.
  }
  return remove_when_empty(dir, wait);
}

class V2RunCgroup : public RunCgroup {
 public:
  V2RunCgroup(std::string dir, UniqueFd fd) : dir_(std::move(dir)), fd_(std::move(fd)) {}
  ~V2RunCgroup() override {
    fd_.reset();
    if (!destroy(dir_)) note_run_cgroup_left_behind();
  }
  int clone_into_fd() const override { return fd_.get(); }
  void add_process(pid_t pid) override { write_text(dir_ + "/cgroup.procs", std::to_string(pid)); }
  std::vector<UniqueFd> open_join_fds() const override { return {}; }
  bool holds(pid_t pid) const override {
    const std::map<std::string, std::string> paths = cgroup_paths_of(pid);
    auto it = paths.find("");
    return it != paths.end() && ends_with_dir(it->second, dir_);
  }
  CgroupUsage usage() const override {
    CgroupUsage u;
    u.cpu_ms = cpu_ms();
    u.peak_memory_bytes = read_number(dir_ + "/memory.peak");
    int64_t oom = read_keyed(dir_ + "/memory.events", "oom_kill");
    u.oom_kills = oom > 0 ? static_cast<uint64_t>(oom) : 0;
    // "oom" counts the times the run's own limit ran out; kills without
    // one were for an OOM above it.
    u.oom_from_above = u.oom_kills > 0 && read_keyed(dir_ + "/memory.events", "oom") == 0;
    int64_t pids_max = read_keyed(dir_ + "/pids.events", "max");
    u.pids_limit_hits = pids_max > 0 ? static_cast<uint64_t>(pids_max) : 0;
    int64_t throttled = read_keyed(dir_ + "/cpu.stat", "nr_throttled");
    u.cpu_throttled = throttled > 0 ? static_cast<uint64_t>(throttled) : 0;
    return u;
  }
  int64_t cpu_ms() const override {
    const int64_t usec = read_keyed(dir_ + "/cpu.stat", "usage_usec");
    return usec >= 0 ? usec / 1000 : -1;
  }
  void kill_all() override {
    try {
      write_text(dir_ + "/cgroup.kill", "1");
    } catch (const SysError&) {
      for (pid_t pid : read_pids(dir_ + "/cgroup.procs")) ::kill(pid, SIGKILL);
    }
  }
  bool counts_cpu_time() const override { return true; }  // cpu.stat is in every cgroup
  std::string describe() const override { return dir_; }
  bool set_cpu_weight(uint32_t weight) override {
    const std::string file = dir_ + "/cpu.weight";  // present only with the cpu controller enabled
    if (::access(file.c_str(), F_OK) != 0) return false;
    write_text(file, std::to_string(std::clamp<uint32_t>(weight, 1, 10000)));
    return true;
  }

 private:
  std::string dir_;
  UniqueFd fd_;
};

}  // namespace

std::unique_ptr<RunCgroup> create_v2_run_cgroup(const CgroupHost& host, const CgroupLimits& limits,
                                                const std::string& run_name) {
  const std::string parent = host.v2_self_dir + "/" + kParentName;
  const std::string controllers = controller_list(limits);
  if (!controllers.empty()) enable_controllers(host.v2_self_dir, controllers);
  const std::string dir = parent + "/" + run_name;
  make_in_run_parent(host.v2_self_dir, [&] {
    if (::mkdir(dir.c_str(), 0755) != 0) throw SysError("mkdir", dir, errno);
  });
  UniqueFd fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto cg = std::make_unique<V2RunCgroup>(dir, std::move(fd));  // removes dir on any throw below
  // After the run's directory: a parent with a child cannot be removed, so
  // the controllers go to the parent the run is in.
  if (!controllers.empty()) write_text(parent + "/cgroup.subtree_control", controllers);
  if (limits.memory_bytes) {
    write_text(dir + "/memory.max", std::to_string(limits.memory_bytes));
    // No swap: the limit is on memory, not on memory plus disk.
    if (::access((dir + "/memory.swap.max").c_str(), F_OK) == 0) write_text(dir + "/memory.swap.max", "0");
    // An OOM kills the whole run, not one random process of it.
    write_text(dir + "/memory.oom.group", "1");
  }
  if (limits.cpus > 0) {
    const long period = 100000;
    const long quota = std::max(1000L, static_cast<long>(limits.cpus * period));
    write_text(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(period));
  }
  if (limits.pids) write_text(dir + "/pids.max", std::to_string(limits.pids));
  if (cg->clone_into_fd() < 0) throw SysError("open", dir, errno);
  return cg;
}

std::string move_into_supervisor_leaf(const CgroupHost& host, const std::vector<pid_t>& ours) {
  if (!host.v2_mount || host.choose({"memory", "cpu", "pids"}) != "v2") return "";
  // The root cgroup, which the rule exempts, alone has no cgroup.type (the
  // root of a cgroup namespace is not it).
  if (::access((host.v2_self_dir + "/cgroup.type").c_str(), F_OK) != 0) return "";
  if (const std::string others = other_members(host.v2_self_dir, ours); !others.empty())
    return "other processes share nsbox's cgroup " + host.v2_self_dir + " (pids " + others +
           "): start nsbox in a cgroup of its own (a systemd unit with Delegate=yes, "
           "`systemd-run --scope -p Delegate=yes nsbox ...`) or give it cgroup_parent";
  try {
    join_supervisor_leaf(host.v2_self_dir, ours);
    return "";
  } catch (const SysError& e) {
    return e.what();
  }
}

void remove_stale_v2(const CgroupHost& host, std::chrono::milliseconds wait, StaleSweep& sweep) {
  if (!host.v2_mount) return;
  const std::string parent = host.v2_self_dir + "/" + kParentName;
  for (const auto& name : list_subdirs(parent)) {
    if (name.rfind("run-", 0) != 0 || run_owner_alive(name)) continue;
    if (destroy(parent + "/" + name, wait))
      ++sweep.removed;
    else
      sweep.left.push_back(parent + "/" + name);
  }
}

}  // namespace nsbox
