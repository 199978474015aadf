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

// core 0 (no dumps of sandbox memory), nofile, fsize from the limits.
std::vector<RlimitSetting> rlimits_for(const Limits& limits);

// Under limits.best_effort, what stands in for cgroup limits the host cannot
// enforce: RLIMIT_DATA per process for memory, RLIMIT_NPROC (per user, in the
// sandbox's own user namespace) for pids, RLIMIT_CPU per process for cpu_time.
// Each is weaker than the cgroup (per process, not per run); the Result says so.
std::vector<RlimitSetting> standin_rlimits(const Limits& limits, const std::set<std::string>& missing,
                                           bool cpu_time_unenforced);

// Applies every setting; returns 0 or errno and the failing resource's name.
int apply_rlimits(const RlimitSetting* settings, size_t count, const char** name) noexcept;

}  // namespace nsbox
