// From a validated Profile to the RunSpec of one run, and the per-run
// overrides that may only tighten what the profile allows.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "nsbox/profile.h"
#include "nsbox/run_spec.h"

namespace nsbox {

// The run's spec as the profile says (argv and stdio are the caller's).
RunSpec spec_from_profile(const Profile& profile);

// The rootfs a profile's runs use, as named: its filesystem.rootfs, or the
// built one for "default".
std::string rootfs_path(const Profile& profile);

// What one run asks for on top of its profile. Every value set must be at most
// the profile's; the error names the limit and both values.
struct RunOverrides {
  std::optional<std::chrono::milliseconds> wall_time;
  std::optional<std::chrono::milliseconds> cpu_time;
  std::optional<uint64_t> memory;
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
};

// Applies overrides to spec (built from profile); throws UsageError
// ("timeout 60s exceeds the profile's limits.wall_time of 30s") when one
// asks for more than the profile allows.
void apply_overrides(const Profile& profile, const RunOverrides& overrides, RunSpec& spec);

}  // namespace nsbox
