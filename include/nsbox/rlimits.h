// Resource limits set in the workload before execve.
#pragma once

#include <sys/resource.h>

#include <set>
#include <string>
#include <vector>

#include "nsbox/run_spec.h"

namespace nsbox {

struct RlimitSetting {
  int resource;
  rlimit value;
};

// Queued signals a run may have pending at once. The kernel charges them,
// like POSIX message queue bytes, to every user up the chain of user
// namespaces, so to host root, and checks a recipient's total against the
// recipient's own rlimit: left at root's (about 96 000 here), one run could
// queue all of root's share, and root's programs would get EAGAIN from
// sigqueue and timer_create until the run ended.
inline constexpr rlim_t kRunPendingSignals = 1024;

// The rlimits of what the kernel charges to host root (above): message
// queue bytes 0 (POSIX message queues have no use in a run), pending
// signals kRunPendingSignals (or nsbox's own hard limit, if lower). The
// kernel checks a run's count against these, and each level above it
// against what the namespace's maker had when it made it. Every run's, and its PID 1's (the workload
// can queue signals to it). Not a fork server's: the rlimit its process
// has when it makes a run's user namespace caps what all its runs
// together may have charged through it.
std::vector<RlimitSetting> charged_rlimits();

// Memory a run's process may lock (RLIMIT_MEMLOCK): the kernel's default
// before 5.16. No runtime in the rootfs locks memory.
inline constexpr rlim_t kRunLockedBytes = 64 << 10;

// core kRunCoreLimit (0 where nsbox's own hard limit is 0), nofile, fsize
// from the limits; rtprio 0, nice 0 and memlock kRunLockedBytes whatever
// nsbox was given.
std::vector<RlimitSetting> rlimits_for(const Limits& limits);

// A run's core limit, in bytes: no core file (the kernel writes none under
// a page) and no dump to a core_pattern pipe, which ignores a limit of 0
// and is aborted at exactly 1.
inline constexpr rlim_t kRunCoreLimit = 1;

// Raises this process's hard core limit to kRunCoreLimit where it is below
// (limits.conf's `hard core 0`) and the process may (CAP_SYS_RESOURCE):
// its runs could not be given the limit otherwise. Its soft limit stays.
// The Launcher's constructor calls it, once per process.
void allow_runs_their_core_limit() noexcept;

// Under limits.best_effort, what stands in for cgroup limits the host cannot
// enforce: RLIMIT_DATA per process for memory, RLIMIT_NPROC (per user, in the
// sandbox's own user namespace) for pids, RLIMIT_CPU per process for cpu_time.
// Each is weaker than the cgroup (per process, not per run); the Result says so.
std::vector<RlimitSetting> standin_rlimits(const Limits& limits, const std::set<std::string>& missing,
                                           bool cpu_time_unenforced);

// Throws SysError naming the first setting above this process's own hard
// limit (which no process of the run could raise), what set it and what
// would do, rather than letting the run fail in its sandbox as an EPERM
// from setrlimit.
void require_within_own_hard_limits(const std::vector<RlimitSetting>& settings);

// Applies every setting; returns 0 or errno and the failing resource's name.
int apply_rlimits(const RlimitSetting* settings, size_t count, const char** name) noexcept;

}  // namespace nsbox
