// cgroup v1 (hybrid hosts): a run cgroup in each of the memory, cpu,
// cpuacct, pids and freezer hierarchies, under nsbox's own cgroup in each.
// The child is moved in before it runs anything; the run is killed by
// freezing it and signalling every member.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "cgroup_internal.h"
#include "nsbox/error.h"

namespace nsbox {

using namespace cgroup_internal;

namespace {

// The hierarchies a run joins; cpuacct gives CPU usage, freezer a clean kill.
constexpr const char* kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids", "freezer"};

bool any_member(const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs)
    if (!read_pids(dir + "/cgroup.procs").empty()) return true;
  return false;
}

void freeze_and_kill(const std::string& freezer_dir, const std::vector<std::string>& dirs) {
  // Freezing flips a kernel static key (text patching on every CPU): only
  // worth it when something is left to kill, which is rare once PID 1 is gone.
  if (!any_member(dirs)) return;
  bool frozen = false;
  if (!freezer_dir.empty()) {
    try {
      write_text(freezer_dir + "/freezer.state", "FROZEN");
      frozen = true;
    } catch (const SysError&) {
    }
  }
  // Frozen members cannot fork while they are being killed.
  for (const auto& dir : dirs) {
    for (pid_t pid : read_pids(dir + "/cgroup.procs")) ::kill(pid, SIGKILL);
  }
  if (frozen) {
    try {
      write_text(freezer_dir + "/freezer.state", "THAWED");
    } catch (const SysError&) {
    }
  }
}

void remove_dirs(const std::string& freezer_dir, const std::vector<std::string>& dirs) {
  freeze_and_kill(freezer_dir, dirs);
  for (const auto& dir : dirs) remove_when_empty(dir);
}

class V1RunCgroup : public RunCgroup {
 public:
  ~V1RunCgroup() override { remove_dirs(dir_of("freezer"), unique_dirs_); }
  int clone_into_fd() const override { return -1; }
  void add_process(pid_t pid) override {
    for (const auto& dir : unique_dirs_) write_text(dir + "/cgroup.procs", std::to_string(pid));
  }
  std::vector<UniqueFd> open_join_fds() const override {
    std::vector<UniqueFd> fds;
    for (const auto& dir : unique_dirs_) {
      const std::string path = dir + "/tasks";
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd) throw SysError("open", path, errno);
      fds.push_back(std::move(fd));
    }
    return fds;
  }
  bool holds(pid_t pid) const override {
    const std::map<std::string, std::string> paths = cgroup_paths_of(pid);
    for (const auto& [controller, dir] : dirs_) {
      auto it = paths.find(controller);
      if (it == paths.end() || !ends_with_dir(it->second, dir)) return false;
    }
    return !dirs_.empty();
  }
  CgroupUsage usage() const override {
    CgroupUsage u;
    u.cpu_ms = cpu_ms();
    if (auto d = dir_of("memory"); !d.empty()) {
      u.peak_memory_bytes = read_number(d + "/memory.max_usage_in_bytes");
      int64_t oom = read_keyed(d + "/memory.oom_control", "oom_kill");
      u.oom_kills = oom > 0 ? static_cast<uint64_t>(oom) : 0;
    }
    if (auto d = dir_of("pids"); !d.empty()) {
      int64_t hits = read_keyed(d + "/pids.events", "max");
      u.pids_limit_hits = hits > 0 ? static_cast<uint64_t>(hits) : 0;
    }
    if (auto d = dir_of("cpu"); !d.empty()) {
      int64_t throttled = read_keyed(d + "/cpu.stat", "nr_throttled");
      u.cpu_throttled = throttled > 0 ? static_cast<uint64_t>(throttled) : 0;
    }
    return u;
  }
  int64_t cpu_ms() const override {
    const std::string d = dir_of("cpuacct");
    const int64_t ns = d.empty() ? -1 : read_number(d + "/cpuacct.usage");
    return ns >= 0 ? ns / 1000000 : -1;
  }
  bool counts_cpu_time() const override { return !dir_of("cpuacct").empty(); }
  void kill_all() override { freeze_and_kill(dir_of("freezer"), unique_dirs_); }
  bool set_cpu_weight(uint32_t weight) override {
    const std::string d = dir_of("cpu");
    if (d.empty()) return false;
    // v1 shares: 1024 is the default, as 100 is v2's; 2 is the least.
    const uint64_t shares = std::max<uint64_t>(2, uint64_t{weight} * 1024 / kDefaultCpuWeight);
    write_text(d + "/cpu.shares", std::to_string(shares));
    return true;
  }
  std::string describe() const override {
    std::string out;
    for (const auto& d : unique_dirs_) out += (out.empty() ? "" : ", ") + d;
    return out;
  }

  void add_dir(const std::string& controller, const std::string& dir) {
    dirs_[controller] = dir;
    if (std::find(unique_dirs_.begin(), unique_dirs_.end(), dir) == unique_dirs_.end()) unique_dirs_.push_back(dir);
  }
  std::string dir_of(const std::string& controller) const {
    auto it = dirs_.find(controller);
    return it == dirs_.end() ? std::string() : it->second;
  }

 private:
  std::map<std::string, std::string> dirs_;  // controller -> run dir (co-mounted ones share)
  std::vector<std::string> unique_dirs_;
};

}  // namespace

std::unique_ptr<RunCgroup> create_v1_run_cgroup(const CgroupHost& host, const CgroupLimits& limits,
                                                const std::string& run_name) {
  auto cg = std::make_unique<V1RunCgroup>();
  for (const char* controller : kV1Controllers) {
    auto it = host.v1_self_dirs.find(controller);
    if (it == host.v1_self_dirs.end()) continue;
    const std::string parent = it->second + "/" + kParentName;
    const std::string dir = parent + "/" + run_name;
    make_dir(parent);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw SysError("mkdir", dir, errno);
    cg->add_dir(controller, dir);  // removed by cg's destructor on any throw below
  }
  if (limits.memory_bytes) {
    const std::string d = cg->dir_of("memory");
    write_text(d + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes));
    // memory+swap at the same limit: no swap (present only with swap accounting).
    if (::access((d + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0)
      write_text(d + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes));
  }
  if (limits.cpus > 0) {
    const std::string d = cg->dir_of("cpu");
    const long period = 100000;
    write_text(d + "/cpu.cfs_period_us", std::to_string(period));
    write_text(d + "/cpu.cfs_quota_us", std::to_string(std::max(1000L, static_cast<long>(limits.cpus * period))));
  }
  if (limits.pids) write_text(cg->dir_of("pids") + "/pids.max", std::to_string(limits.pids));
  return cg;
}

int remove_stale_v1(const CgroupHost& host) {
  // Collect each stale run's directories across hierarchies, then remove them
  // together (the freezer one is used to stop its members first).
  std::map<std::string, std::map<std::string, std::string>> stale;  // run -> controller -> dir
  for (const auto& [controller, self_dir] : host.v1_self_dirs) {
    const std::string parent = self_dir + "/" + kParentName;
    for (const auto& name : list_subdirs(parent)) {
      if (name.rfind("run-", 0) == 0 && !run_owner_alive(name)) stale[name][controller] = parent + "/" + name;
    }
  }
  for (const auto& [name, dirs] : stale) {
    std::vector<std::string> all;
    std::string freezer;
    for (const auto& [controller, dir] : dirs) {
      if (std::find(all.begin(), all.end(), dir) == all.end()) all.push_back(dir);
      if (controller == "freezer") freezer = dir;
    }
    remove_dirs(freezer, all);
  }
  return static_cast<int>(stale.size());
}

}  // namespace nsbox
