// cgroup v1 (hybrid hosts): a run cgroup in each of the memory, cpu,
// cpuacct, pids and freezer hierarchies, under nsbox's own cgroup in each.
// The child is moved in before it runs anything; the run is killed by
// freezing it and signalling every member, and ended by the supervisor at
// its first OOM kill (v2 has memory.oom.group for that).
#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
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

bool any_member(const std::vector<CgroupDir>& dirs) {
  for (const auto& dir : dirs)
    if (!dir.members().empty()) return true;
  return false;
}

void freeze_and_kill(const CgroupDir* freezer, const std::vector<CgroupDir>& dirs) {
  // Freezing flips a kernel static key (text patching on every CPU): only
  // worth it when something is left to kill, which is rare once PID 1 is gone.
  if (!any_member(dirs)) return;
  bool frozen = false;
  if (freezer) {
    try {
      freezer->write("freezer.state", "FROZEN");
      frozen = true;
    } catch (const SysError&) {
    }
  }
  // Frozen members cannot fork while they are being killed.
  for (const auto& dir : dirs) {
    for (pid_t pid : dir.members()) ::kill(pid, SIGKILL);
  }
  if (frozen) {
    try {
      freezer->write("freezer.state", "THAWED");
    } catch (const SysError&) {
    }
  }
}

// Removes a run's directories. An empty run (the usual case: PID 1 is gone)
// takes one rmdir per hierarchy; members left are frozen (when freezer is
// given) and killed first. False when a directory is still there after
// `wait`, which the hierarchies share (a stuck process is in each).
bool remove_dirs(const std::vector<CgroupDir>& dirs, const CgroupDir* freezer,
                 std::chrono::milliseconds wait = kRunCgroupEmptyWait) {
  bool all_removed = true;
  for (const auto& dir : dirs) all_removed &= ::rmdir(dir.path.c_str()) == 0 || errno == ENOENT;
  if (all_removed) return true;
  freeze_and_kill(freezer, dirs);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (const auto& dir : dirs) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    all_removed = remove_when_empty(dir.path, std::max(left, std::chrono::milliseconds(0))) && all_removed;
  }
  return all_removed;
}

class V1RunCgroup : public RunCgroup {
 public:
  ~V1RunCgroup() override {
    if (!remove_dirs(dirs_, dir_of("freezer"))) note_run_cgroup_left_behind();
  }
  int clone_into_fd() const override { return -1; }
  void add_process(pid_t pid) override {
    for (const auto& dir : dirs_) dir.write("cgroup.procs", std::to_string(pid));
  }
  std::vector<UniqueFd> open_join_fds() const override {
    std::vector<UniqueFd> fds;
    for (const auto& dir : dirs_) {
      UniqueFd fd(::openat(dir.fd.get(), "tasks", O_WRONLY | O_CLOEXEC));
      if (!fd) {
        const int err = errno;
        throw SysError("open", dir.path + "/tasks", err);
      }
      fds.push_back(std::move(fd));
    }
    return fds;
  }
  bool holds(pid_t pid) const override {
    const std::map<std::string, std::string> paths = cgroup_paths_of(pid);
    for (const auto& [controller, index] : index_) {
      auto it = paths.find(controller);
      if (it == paths.end() || !ends_with_dir(it->second, dirs_[index].path)) return false;
    }
    return !index_.empty();
  }
  CgroupUsage usage() const override {
    CgroupUsage u;
    u.cpu_ms = cpu_ms();
    if (const CgroupDir* d = dir_of("memory")) {
      u.peak_memory_bytes = d->number("memory.max_usage_in_bytes");
      int64_t oom = d->keyed("memory.oom_control", "oom_kill");
      u.oom_kills = oom > 0 ? static_cast<uint64_t>(oom) : 0;
      // With its OOM killer off (watch_oom), the kernel kills in the run's
      // cgroup only for an OOM above it.
      u.oom_from_above = kills_at_watch_ >= 0 && oom > kills_at_watch_;
    }
    if (const CgroupDir* d = dir_of("pids")) {
      int64_t hits = d->keyed("pids.events", "max");
      u.pids_limit_hits = hits > 0 ? static_cast<uint64_t>(hits) : 0;
    }
    if (const CgroupDir* d = dir_of("cpu")) {
      int64_t throttled = d->keyed("cpu.stat", "nr_throttled");
      u.cpu_throttled = throttled > 0 ? static_cast<uint64_t>(throttled) : 0;
    }
    return u;
  }
  int64_t cpu_ms() const override {
    const CgroupDir* d = dir_of("cpuacct");
    const int64_t ns = d ? d->number("cpuacct.usage") : -1;
    return ns >= 0 ? ns / 1000000 : -1;
  }
  bool counts_cpu_time() const override { return dir_of("cpuacct") != nullptr; }
  void kill_all() override { freeze_and_kill(dir_of("freezer"), dirs_); }
  int oom_events_fd() const override { return oom_events_.get(); }
  bool took_own_oom_event() override {
    uint64_t events = 0;
    if (::read(oom_events_.get(), &events, sizeof events) < 0 && errno != EAGAIN) oom_events_.reset();
    // With the kernel's OOM killer off here, a process of the run that
    // faults past the limit waits, and the cgroup stays under_oom until
    // the supervisor ends the run. An OOM of a cgroup above clears the
    // mark right after its notification, before its own OOM kill.
    const int64_t under_oom = dir_of("memory")->keyed("memory.oom_control", "under_oom");
    return under_oom != 0;  // unreadable (-1): ended all the same
  }
  // Has the kernel signal oom_events_fd() at every OOM in the run's memory
  // cgroup or above it (v1's notification: an eventfd and
  // memory.oom_control, named to cgroup.event_control), and turns its OOM
  // killer off there, so that a run out of memory is ended whole by the
  // supervisor and never writes an OOM report to the host's kernel log.
  // Refused on PREEMPT_RT kernels and by some container runtimes.
  std::string watch_oom() override {
    const CgroupDir* d = dir_of("memory");
    if (!memory_limited_ || !d || oom_events_) return "";
    try {
      UniqueFd events(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      if (!events) throw SysError("eventfd", "OOM events of " + d->path, errno);
      UniqueFd control(::openat(d->fd.get(), "memory.oom_control", O_RDONLY | O_CLOEXEC));
      if (!control) throw SysError("open", d->path + "/memory.oom_control", errno);
      d->write("cgroup.event_control", std::to_string(events.get()) + " " + std::to_string(control.get()));
      d->write("memory.oom_control", "1");
      kills_at_watch_ = std::max<int64_t>(d->keyed("memory.oom_control", "oom_kill"), 0);
      oom_events_ = std::move(events);
      return "";
    } catch (const SysError& e) {
      return std::string("a child's OOM kill does not end the run: its cgroup's OOM events cannot be watched (") +
             e.what() + ")";
    }
  }
  void set_memory_limited() { memory_limited_ = true; }
  bool set_cpu_weight(uint32_t weight) override {
    const CgroupDir* d = dir_of("cpu");
    if (!d) return false;
    // v1 shares: 1024 is the default, as 100 is v2's; 2 is the least.
    const uint64_t shares = std::max<uint64_t>(2, uint64_t{weight} * 1024 / kDefaultCpuWeight);
    d->write("cpu.shares", std::to_string(shares));
    return true;
  }
  std::string describe() const override {
    std::string out;
    for (const auto& d : dirs_) out += (out.empty() ? "" : ", ") + d.path;
    return out;
  }

  // Adds controller's directory (created); co-mounted controllers share one.
  void add_dir(const std::string& controller, const std::string& path) {
    auto same = std::find_if(dirs_.begin(), dirs_.end(), [&](const CgroupDir& d) { return d.path == path; });
    if (same == dirs_.end()) {
      // Removed by the destructor even if it cannot be opened.
      dirs_.push_back(CgroupDir{path, UniqueFd()});
      dirs_.back() = CgroupDir::open(path);
      same = dirs_.end() - 1;
    }
    index_[controller] = static_cast<size_t>(same - dirs_.begin());
  }
  const CgroupDir* dir_of(const std::string& controller) const {
    auto it = index_.find(controller);
    return it == index_.end() ? nullptr : &dirs_[it->second];
  }
  // The directory of a controller a limit needs; a host without its
  // hierarchy cannot enforce the limit, and the run's cgroup is not made.
  const CgroupDir& needed(const std::string& controller) const {
    const CgroupDir* d = dir_of(controller);
    if (!d)
      throw SysError("cgroup v1", "no " + controller + " hierarchy for the run's " + controller + " limit", ENOENT);
    return *d;
  }

 private:
  std::vector<CgroupDir> dirs_;          // one per directory, in creation order
  std::map<std::string, size_t> index_;  // controller -> its entry in dirs_
  UniqueFd oom_events_;
  int64_t kills_at_watch_ = -1;  // memory.oom_control's oom_kill when watch_oom turned the killer off
  bool memory_limited_ = false;
};

}  // namespace

std::unique_ptr<RunCgroup> create_v1_run_cgroup(const CgroupHost& host, const CgroupLimits& limits,
                                                const std::string& run_name) {
  auto cg = std::make_unique<V1RunCgroup>();
  for (const char* controller : kV1Controllers) {
    auto it = host.v1_self_dirs.find(controller);
    if (it == host.v1_self_dirs.end()) continue;
    const std::string dir = it->second + "/" + kParentName + "/" + run_name;
    make_in_run_parent(it->second, [&] {
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw SysError("mkdir", dir, errno);
    });
    cg->add_dir(controller, dir);  // removed by cg's destructor on any throw below
  }
  if (limits.memory_bytes) {
    const CgroupDir& d = cg->needed("memory");
    d.write("memory.limit_in_bytes", std::to_string(limits.memory_bytes));
    // memory+swap at the same limit: no swap (present only with swap accounting).
    if (d.has("memory.memsw.limit_in_bytes"))
      d.write("memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes));
    // Without swap accounting (no memsw files: swapaccount=0) a run at its
    // limit would push its pages to swap, uncharged, and grow past it on a
    // host with swap. Swappiness 0 keeps the cgroup's own reclaim off
    // anonymous memory: at its limit the run is OOM-killed, as on v2.
    d.write("memory.swappiness", "0");
    // Socket buffers: v1 charges them to a memory cgroup only once this is
    // set (unset, a run held 574 MiB of TCP buffers on the host under a 64
    // MiB limit), and to a counter of their own, on top of the limit: a
    // quarter of it (v2 charges them to memory.current, within it).
    if (d.has("memory.kmem.tcp.limit_in_bytes"))
      d.write("memory.kmem.tcp.limit_in_bytes", std::to_string(limits.memory_bytes / 4));
    cg->set_memory_limited();
  }
  if (limits.cpus > 0) {
    const CgroupDir& d = cg->needed("cpu");
    const long period = 100000;
    d.write("cpu.cfs_period_us", std::to_string(period));
    d.write("cpu.cfs_quota_us", std::to_string(std::max(1000L, static_cast<long>(limits.cpus * period))));
  }
  if (limits.pids) cg->needed("pids").write("pids.max", std::to_string(limits.pids));
  return cg;
}

void remove_stale_v1(const CgroupHost& host, std::chrono::milliseconds wait, StaleSweep& sweep) {
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
    std::vector<CgroupDir> all;
    std::string freezer_path;
    for (const auto& [controller, dir_path] : dirs) {
      const std::string& dir = dir_path;  // clang before 16 cannot capture a structured binding in a lambda
      if (std::none_of(all.begin(), all.end(), [&](const CgroupDir& d) { return d.path == dir; })) {
        try {
          all.push_back(CgroupDir::open(dir));
        } catch (const SysError&) {
          all.push_back(CgroupDir{dir, UniqueFd()});  // removed by path all the same
        }
      }
      if (controller == "freezer") freezer_path = dir;
    }
    auto freezer = std::find_if(all.begin(), all.end(), [&](const CgroupDir& d) { return d.path == freezer_path; });
    // A sweep with a short wait is a retry, of a process stuck in the
    // kernel, which cannot fork: no freeze, which patches the kernel's text
    // on every CPU, every few seconds.
    const bool retry = wait < kRunCgroupEmptyWait;
    if (remove_dirs(all, freezer == all.end() || retry ? nullptr : &*freezer, wait)) {
      ++sweep.removed;
      continue;
    }
    for (const auto& dir : all)
      if (::access(dir.path.c_str(), F_OK) == 0) sweep.left.push_back(dir.path);
  }
}

}  // namespace nsbox
