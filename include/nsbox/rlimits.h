// Resource limits set in the workload before execve.
#pragma once

#include <sys/resource.h>

#include <vector>

#include "nsbox/run_spec.h"

namespace nsbox {

struct RlimitSetting {
  int resource;
  rlimit value;
};

// core 0 (no dumps of sandbox memory), nofile, fsize from the limits.
std::vector<RlimitSetting> rlimits_for(const Limits& limits);

// Applies every setting; returns 0 or errno and the failing resource's name.
int apply_rlimits(const RlimitSetting* settings, size_t count, const char** name) noexcept;

}  // namespace nsbox
