// The supervisor: turns a RunSpec into a running sandbox and a Result.
#pragma once

#include <sched.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nsbox/caps.h"
#include "nsbox/cgroup.h"
#include "nsbox/result.h"
#include "nsbox/run_spec.h"
#include "nsbox/seccomp.h"
#include "nsbox/userns.h"

namespace nsbox {

// Namespaces every sandbox gets. All of them, always: there is no option to
// share one with the host.
constexpr unsigned long kSandboxNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

// Holds what is the same for every run (the compiled seccomp program, the
// prepared capability sets, the host ids) so a launch only does per-run work.
// Not thread-safe: one thread launches, and the child runs only raw system
// calls until its execve (see child.h), so other threads of the process
// (`nsbox run`'s stdio relay, the egress proxy) hold no lock it needs.
// Constructed by root, it drops the process's supplementary groups,
// which would otherwise follow every sandbox into its user namespace.
struct LauncherOptions {
  // The cgroup v2 directory under which run cgroups are created (default:
  // the cgroup nsbox runs in), e.g. a systemd slice with Delegate=yes.
  std::string cgroup_parent;
  // Detected from the host when empty; tests pass a host lacking controllers.
  std::optional<CgroupHost> cgroup_host;
};

// A sandbox started ahead of its run: namespaces, mounts, cgroup, seccomp
// in place and the workload running up to where it waits for its stdin (a
// runner waiting for its request). finish() feeds the stdin, starts the
// clocks, supervises and returns the Result; destroying it unfinished kills
// and removes the sandbox. Used once, never reused.
class PreparedRun {
 public:
  ~PreparedRun();
  PreparedRun(const PreparedRun&) = delete;
  PreparedRun& operator=(const PreparedRun&) = delete;

  // stdin_data: written to the workload's stdin (prepared with
  // RunSpec::stdin_data set), then EOF. The wall-clock deadline and the
  // Result's wall_ms count from `started` (default: now); CPU time used
  // before finish() (while waiting) is not the run's. Once only.
  Result finish(std::optional<std::string> stdin_data, std::chrono::milliseconds wall_time, int cancel_fd = -1,
                std::optional<std::chrono::steady_clock::time_point> started = std::nullopt);

  // PID 1's pidfd (readable when the sandbox ended while waiting), or -1
  // when the sandbox could not be built (finish() then says why).
  int pidfd() const;
  pid_t pid() const;  // PID 1's, as this process sees it, or -1
  // Waits until the workload blocks reading its stdin (its start-up is
  // done), looking every check_every, up to timeout or until abort_fd (if
  // not -1) is readable; false when it did not (it ended, is slower, or was
  // aborted). Each look wakes this process, which takes a CPU from the
  // start-up it waits for.
  bool wait_for_input(std::chrono::milliseconds timeout, std::chrono::milliseconds check_every,
                      int abort_fd = -1) const;
  // A request waits for this sandbox: the rest of its start-up runs at the
  // default CPU weight instead of prepare's start_cpu_weight. False when
  // the weight could not be raised (finish() tries again).
  bool restore_cpu_weight();
  // From now on, each decision of the sandbox's egress proxy (if it has
  // one) is also told to journal as it is made.
  void journal_egress(EgressJournal journal);
  // For a fork server's sandbox: waits until the zygote blocks receiving its
  // requests (its preloads are done), up to timeout or until abort_fd (if
  // not -1) is readable; false when it did not.
  bool wait_for_fork_requests(std::chrono::milliseconds timeout, int abort_fd) const;
  // The most memory the sandbox has held so far (its cgroup's), or -1.
  int64_t memory_bytes() const;
  // For a sandbox that stays up (a fork server): the workload's stdout and
  // stderr pipes still open, to poll; drain_output() reads what is there
  // without blocking, so that the workload never stalls on a full pipe,
  // hands each complete stderr line (or 4 KiB of one) to `line` and drops
  // stdout. What is left is finish()'s.
  std::vector<int> output_fds() const;
  void drain_output(const std::function<void(std::string_view)>& line);

  struct State;

 private:
  friend class Launcher;
  explicit PreparedRun(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Launcher {
 public:
  // Detects the host's cgroups and removes run cgroups left by nsbox
  // processes that died without cleaning up.
  explicit Launcher(const LauncherOptions& options = {});
  // Removes the cgroup parents runs were made in once no run is left there
  // (remove_empty_run_parents). Processes forked from a launcher's owner
  // leave with _exit and never get here.
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Runs one sandbox to completion. cancel_fd, if >= 0, is polled: when it
  // becomes readable (e.g. a signalfd for SIGINT/SIGTERM) the sandbox is torn
  // down and the Result says killed. Setup failures come back as status
  // setup_error with the step, object and errno; only an invalid spec throws
  // (UsageError). journal, if set, is told each egress decision as it is
  // made (see EgressProxy::set_journal).
  Result run(const RunSpec& spec, int cancel_fd = -1, const EgressJournal& journal = {}) const;

  // Starts spec's sandbox and leaves it waiting (see PreparedRun). Never
  // throws for a sandbox that cannot be built: finish() reports it.
  // start_cpu_weight (cgroup v2 units), if set, is the sandbox's CPU weight
  // until finish(), which restores the default before the run begins: a
  // warm sandbox starts up in the background of the runs being served.
  std::unique_ptr<PreparedRun> prepare(const RunSpec& spec,
                                       std::optional<uint32_t> start_cpu_weight = std::nullopt) const;
  // The same, but the sandbox is forked by the fork server listening on
  // fork_server (fork_server.h) instead of started from nothing: its own
  // cgroup and namespaces, the interpreter already started. A spec the fork
  // server cannot run (fork_server_refusal), or a fork server that is gone,
  // makes a setup error. No start-up weight: the run's PID 1 holds the
  // fork server while it sets the run up, under the fork's step deadlines;
  // at a low weight, a busy host would stall every fork behind it.
  std::unique_ptr<PreparedRun> prepare_forked(const RunSpec& spec, int fork_server) const;

  const HostIds& host_ids() const { return host_ids_; }
  const CgroupHost& cgroup_host() const { return cgroups_; }
  // What the constructor removed of nsbox processes that died without
  // cleaning up: run cgroup directories and workspaces.
  int stale_removed() const { return stale_removed_; }
  const SeccompProgram& seccomp() const { return seccomp_; }

 private:
  SeccompProgram seccomp_;
  CapabilityDrop caps_;
  HostIds host_ids_;
  CgroupHost cgroups_;
  std::pair<uintptr_t, uintptr_t> cmdline_;  // this process's argv in memory
  int stale_removed_ = 0;

  // The compiled filter for a run; compiled once per distinct policy.
  const SeccompProgram& seccomp_for(const SeccompChoice& choice) const;
  mutable std::map<std::string, SeccompProgram> extra_seccomp_;

  // The run's cgroup, or null when the run needs none and the host offers
  // none. Refuses (SysError/UsageError) when a limit cannot be enforced and
  // spec.limits.best_effort is off; otherwise records warnings.
  // cpu_time_by_cgroup: the cgroup can measure the run's CPU time, so it
  // enforces cpu_time (else RLIMIT_CPU stands in, or the run is refused).
  std::unique_ptr<RunCgroup> make_cgroup(const RunSpec& spec, std::vector<std::string>& warnings,
                                         std::set<std::string>& unenforced, bool& cpu_time_by_cgroup) const;
};

}  // namespace nsbox
