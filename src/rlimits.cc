#include "nsbox/rlimits.h"

#include <cerrno>
#include <string>

#include "nsbox/error.h"

namespace nsbox {
namespace {

const char* resource_name(int resource) {
  switch (resource) {
    case RLIMIT_CORE:
      return "RLIMIT_CORE";
    case RLIMIT_NOFILE:
      return "RLIMIT_NOFILE";
    case RLIMIT_FSIZE:
      return "RLIMIT_FSIZE";
    case RLIMIT_CPU:
      return "RLIMIT_CPU";
    case RLIMIT_NPROC:
      return "RLIMIT_NPROC";
    case RLIMIT_DATA:
      return "RLIMIT_DATA";
    case RLIMIT_MSGQUEUE:
      return "RLIMIT_MSGQUEUE";
    case RLIMIT_SIGPENDING:
      return "RLIMIT_SIGPENDING";
    case RLIMIT_RTPRIO:
      return "RLIMIT_RTPRIO";
    case RLIMIT_NICE:
      return "RLIMIT_NICE";
    case RLIMIT_MEMLOCK:
      return "RLIMIT_MEMLOCK";
    default:
      return "rlimit";
  }
}

// Where a run's value of resource comes from, for the error that says
// what would do.
const char* source_of(int resource) {
  switch (resource) {
    case RLIMIT_NOFILE:
      return "the profile's limits.open_files";
    case RLIMIT_FSIZE:
      return "the profile's limits.file_size";
    case RLIMIT_DATA:
      return "the profile's limits.memory (as a best-effort stand-in)";
    case RLIMIT_NPROC:
      return "the profile's limits.pids (as a best-effort stand-in)";
    case RLIMIT_CPU:
      return "the profile's limits.cpu_time (as a best-effort stand-in)";
    default:
      return "nsbox's fixed value";
  }
}

// RLIMIT_NOFILE -> NOFILE, as systemd's LimitNOFILE= spells it.
std::string systemd_suffix(const std::string& name) { return name.rfind("RLIMIT_", 0) == 0 ? name.substr(7) : name; }

std::string rlim_text(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

}  // namespace

void require_within_own_hard_limits(const std::vector<RlimitSetting>& settings) {
  for (const RlimitSetting& s : settings) {
    rlimit own{};
    if (::getrlimit(static_cast<__rlimit_resource>(s.resource), &own) != 0) continue;
    if (own.rlim_max == RLIM_INFINITY || (s.value.rlim_max != RLIM_INFINITY && s.value.rlim_max <= own.rlim_max))
      continue;
    throw SysError("setrlimit",
                   std::string(resource_name(s.resource)) + " " + rlim_text(s.value.rlim_max) + " (" +
                       source_of(s.resource) + ") is above nsbox's own hard limit " + rlim_text(own.rlim_max) +
                       ", which no process of the run may raise: raise nsbox's (ulimit -H, or Limit" +
                       systemd_suffix(resource_name(s.resource)) + "= in its systemd unit) or lower the run's",
                   EPERM);
  }
}

std::vector<RlimitSetting> charged_rlimits() {
  // Never above nsbox's own hard limit, which PID 1 could not raise.
  rlimit own{};
  rlim_t pending = kRunPendingSignals;
  if (::getrlimit(RLIMIT_SIGPENDING, &own) == 0 && own.rlim_max < pending) pending = own.rlim_max;
  return {
      {RLIMIT_MSGQUEUE, {0, 0}},
      {RLIMIT_SIGPENDING, {pending, pending}},
  };
}

std::vector<RlimitSetting> rlimits_for(const Limits& limits) {
  // A fixed ceiling of nsbox's own, never above nsbox's hard limit (a lower
  // one is only stricter); the profile's limits are not lowered this way.
  rlimit own{};
  rlim_t locked = kRunLockedBytes;
  if (::getrlimit(RLIMIT_MEMLOCK, &own) == 0 && own.rlim_max < locked) locked = own.rlim_max;
  // Not 0, which a core_pattern pipe ignores: the crashed run's memory
  // would go to the host's helper, which runs as root. 0 only where nsbox
  // itself may not have more (allow_runs_their_core_limit, which the
  // Launcher calls); the seccomp filter keeps a run from lowering it.
  rlim_t core = kRunCoreLimit;
  if (::getrlimit(RLIMIT_CORE, &own) == 0 && own.rlim_max < core) core = own.rlim_max;
  return {
      {RLIMIT_CORE, {core, core}},
      {RLIMIT_NOFILE, {limits.open_files, limits.open_files}},
      {RLIMIT_FSIZE, {limits.file_size, limits.file_size}},
      // Set, not inherited from whoever started nsbox (a unit's LimitRTPRIO=
      // would let a run take a CPU with real-time scheduling): no real-time
      // priority, no raised priority, and locked memory only as much as the
      // kernel's old default.
      {RLIMIT_RTPRIO, {0, 0}},
      {RLIMIT_NICE, {0, 0}},
      {RLIMIT_MEMLOCK, {locked, locked}},
  };
}

void allow_runs_their_core_limit() noexcept {
  rlimit own{};
  if (::getrlimit(RLIMIT_CORE, &own) != 0 || own.rlim_max >= kRunCoreLimit) return;
  own.rlim_max = kRunCoreLimit;
  ::setrlimit(RLIMIT_CORE, &own);  // EPERM without CAP_SYS_RESOURCE: runs then get 0
}

std::vector<RlimitSetting> standin_rlimits(const Limits& limits, const std::set<std::string>& missing,
                                           bool cpu_time_unenforced) {
  std::vector<RlimitSetting> out;
  if (missing.count("memory")) {
    const rlim_t bytes = limits.cgroup.memory_bytes;
    out.push_back({RLIMIT_DATA, {bytes, bytes}});
  }
  if (missing.count("pids")) {
    const rlim_t n = limits.cgroup.pids;
    out.push_back({RLIMIT_NPROC, {n, n}});
  }
  if (cpu_time_unenforced) {
    const rlim_t sec = static_cast<rlim_t>((limits.cpu_time.count() + 999) / 1000);
    out.push_back({RLIMIT_CPU, {sec, sec + 1}});
  }
  return out;
}

int apply_rlimits(const RlimitSetting* settings, size_t count, const char** name) noexcept {
  for (size_t i = 0; i < count; ++i) {
    if (setrlimit(static_cast<__rlimit_resource>(settings[i].resource), &settings[i].value) != 0) {
      *name = resource_name(settings[i].resource);
      return errno;
    }
  }
  return 0;
}

}  // namespace nsbox
