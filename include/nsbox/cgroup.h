// Cgroups: one cgroup per run bounds its memory, CPU and process count, is the
// source of its usage figures, and is killed and removed as a whole at the
// end. cgroup v2 where the host offers the controllers there; else the v1
// hierarchies (hybrid hosts). nsbox only ever creates cgroups below the ones
// it runs in, and removes every one it creates.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nsbox/unique_fd.h"

namespace nsbox {

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0: no memory limit
  uint64_t pids = 0;          // 0: no pids limit
  double cpus = 0;            // 0: no CPU bandwidth limit
  bool any() const { return memory_bytes || pids || cpus > 0; }
};

// What the host offers, found from /proc/self/mountinfo and /proc/self/cgroup.
struct CgroupHost {
  // cgroup2: the mount point, the cgroup nsbox runs in (absolute directory)
  // and the controllers available to it (cgroup.controllers there).
  std::optional<std::string> v2_mount;
  std::string v2_self_dir;
  std::set<std::string> v2_controllers;
  // The controllers of the cgroup2 root: those missing from v2_controllers
  // were withheld from nsbox's cgroup (a unit or scope without Delegate=yes).
  std::set<std::string> v2_root_controllers;
  // cgroup v1: controller -> the directory of nsbox's own cgroup in that
  // hierarchy (e.g. "memory" -> "/sys/fs/cgroup/memory/process_api/x").
  std::map<std::string, std::string> v1_self_dirs;

  // Overrides nsbox's own cgroup as the parent of run cgroups (tests use it
  // to simulate hosts lacking a controller; operators to use a delegated
  // slice). For v2 only.
  static CgroupHost detect(const std::string& v2_parent_override = "");

  // Which version nsbox uses for limits: v2 when it has every controller
  // `needed` asks for (memory, cpu, pids), else v1 when it has them, else
  // the version with the most of them. Empty: neither has any.
  std::string choose(const std::set<std::string>& needed) const;
  // Controllers of `needed` that the chosen version lacks.
  std::set<std::string> missing(const std::set<std::string>& needed) const;
};

// Controllers a set of limits needs ("memory", "cpu", "pids").
std::set<std::string> controllers_for(const CgroupLimits& limits);

// Why `parent` cannot be the cgroup v2 parent of runs with these limits, or
// "" when it can: it must be an absolute, existing directory, and this host
// must enforce such limits through cgroup v2 (on v1 it would be ignored).
std::string cgroup_parent_problem(const std::string& parent, const CgroupLimits& limits);

struct CgroupUsage {
  int64_t cpu_ms = -1;  // -1: unknown
  int64_t peak_memory_bytes = -1;
  uint64_t oom_kills = 0;
  // The kills were the kernel's for memory that ran out above the run's
  // cgroup (on the host, or in a cgroup that holds nsbox): the run's own
  // limit was not reached.
  bool oom_from_above = false;
  uint64_t pids_limit_hits = 0;
  uint64_t cpu_throttled = 0;  // periods in which the run was throttled
};

// The cgroup of one run (in every hierarchy that applies). Created before
// clone; the destructor kills every process still in it, waits until it is
// empty and removes it.
class RunCgroup {
 public:
  virtual ~RunCgroup() = default;
  // A directory fd for clone3(CLONE_INTO_CGROUP), or -1 when the child has
  // to be moved in with add_process before it runs anything (v1).
  virtual int clone_into_fd() const = 0;
  virtual void add_process(pid_t pid) = 0;
  // v1: the run's `tasks` file in each hierarchy, opened for writing. A
  // single-threaded process that writes "0" to each moves itself in. The
  // kernel checks that write against the credentials of this opener, and
  // (on recent kernels, 6.18 included) moving the caller's own thread takes
  // no global lock, whereas writing a pid to cgroup.procs (add_process)
  // waits for an RCU grace period: about 10 ms here, once per run. Empty on
  // v2, whose processes are cloned into the cgroup (clone_into_fd) or moved
  // with add_process. Throws SysError naming the file that could not be
  // opened.
  virtual std::vector<UniqueFd> open_join_fds() const = 0;
  // Whether process pid is in this cgroup in every hierarchy it spans, as
  // /proc/PID/cgroup tells this process. For a process that joined by
  // itself, through code nsbox does not ship in its own binary.
  virtual bool holds(pid_t pid) const = 0;
  virtual CgroupUsage usage() const = 0;
  // CPU time used so far, or -1; one file read (usage() reads five).
  virtual int64_t cpu_ms() const = 0;
  // Whether cpu_ms() has a counter to read at all (v1 needs the cpuacct
  // hierarchy; every v2 cgroup has cpu.stat). Known without any I/O.
  virtual bool counts_cpu_time() const = 0;
  virtual void kill_all() = 0;
  // An eventfd that turns readable at an OOM, where the kernel does not end
  // the whole run at its first OOM kill by itself (v1; v2's
  // memory.oom.group does): the supervisor then ends it, so that a run
  // cannot OOM-kill its children over and over (each kill writes the
  // host's kernel log). -1 when there is none to watch.
  virtual int oom_events_fd() const { return -1; }
  // Once oom_events_fd() is readable: takes the event, and tells whether
  // the run hit its own memory limit since the last one. The kernel also
  // signals an OOM of a cgroup above the run's (a limit on nsbox's
  // service), which is not the run's to end for.
  virtual bool took_own_oom_event() { return false; }
  // Starts what oom_events_fd() needs, when the supervisor starts watching
  // the run (not before: a warm sandbox's interpreter starting up is left
  // to the kernel's OOM killer, so that a start that runs out of memory
  // fails instead of waiting). Returns why it cannot ("" when it does, or
  // need not): a warning of the run's, which then goes on after a child's
  // OOM kill as the kernel leaves it.
  virtual std::string watch_oom() { return ""; }
  // The run's share of CPU time against its siblings when the CPUs are
  // contended, in cgroup v2 units (1..10000; kDefaultCpuWeight is everyone's
  // default). False when the run's cgroup has no cpu controller. Throws
  // SysError when the file cannot be written.
  virtual bool set_cpu_weight(uint32_t weight) = 0;
  virtual std::string describe() const = 0;  // where it lives, for logs
};

constexpr uint32_t kDefaultCpuWeight = 100;

// Creates the cgroup of a run named run_name with limits, using version
// `version` ("v1" or "v2") of host. Throws SysError naming the file that
// could not be created or written.
std::unique_ptr<RunCgroup> create_run_cgroup(const CgroupHost& host, const std::string& version,
                                             const CgroupLimits& limits, const std::string& run_name);

// Name of this process's runs: "run-<pid>-<starttime>-<n>-p<pid ns inode>".
// A run whose named process is gone (or started at another time) is stale.
std::string next_run_cgroup_name();

// How long nsbox waits for the killed members of a run cgroup to go before
// it leaves the cgroup (run_cgroup_left_behind).
constexpr std::chrono::milliseconds kRunCgroupEmptyWait{1000};

// What a sweep of stale run cgroups did: how many runs it removed, and the
// directories it could not remove yet, as a member SIGKILL had not ended
// within the sweep's wait.
struct StaleSweep {
  int removed = 0;
  std::vector<std::string> left;
};

// Removes the run cgroups of nsbox processes that are gone without having
// removed them (SIGKILL, power loss, a run cgroup left behind): kills what
// is left in them, then rmdir, waiting up to `wait` per run for its killed
// members to go. Touches only directories named run-* inside nsbox's own
// "nsbox" parent directories.
StaleSweep remove_stale_run_cgroups(const CgroupHost& host, std::chrono::milliseconds wait = kRunCgroupEmptyWait);

// Whether a run cgroup this process made could not be removed when its run
// ended: a process in it that SIGKILL did not end within about a second
// (stuck in the kernel: a stalled NFS or FUSE file, memory pressure above
// the run). Its directory stays, with the process, for the next sweep
// (remove_stale_run_cgroups) once this process is gone. A node's workers
// tell their spawner so through their exit status.
bool run_cgroup_left_behind();

// On a host whose runs get their limits through cgroup v2, moves `ours`
// (nsbox's processes) from their cgroup into the leaf
// "<own cgroup>/nsbox-supervisor": a cgroup that holds processes cannot hand
// controllers down to the runs' (the no-internal-processes rule). `nsbox
// run` moves itself when it first makes a run cgroup; a node moves its
// server and its spawner (under systemd the unit's cgroup holds both) once
// its config is loaded, unless the config names a cgroup_parent. Nothing
// to do in the root cgroup, which the rule exempts, and nothing is moved
// while other processes share the cgroup. Returns "" or why not (runs with
// limits then fail naming the cause).
std::string move_into_supervisor_leaf(const CgroupHost& host, const std::vector<pid_t>& ours);

// Removes nsbox's "nsbox" parent directories from its own cgroups when no
// run is left in them, so that an nsbox that ends leaves no cgroup it made
// behind. (On cgroup v2, the "nsbox-supervisor" leaf nsbox may have moved
// itself into stays: a process cannot remove the cgroup it is in.)
void remove_empty_run_parents(const CgroupHost& host) noexcept;

}  // namespace nsbox
