// Result: the machine-readable report of one run (modelled on isolate's meta file).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nsbox/egress_report.h"
#include "nsbox/workspace.h"

namespace nsbox {

enum class RunStatus {
  kOk,           // exited 0
  kExitNonzero,  // exited with a non-zero code
  kTimeout,      // killed at the wall-clock deadline
  kKilled,       // killed by a signal (its own, or nsbox's teardown on SIGINT/SIGTERM)
  kOom,          // killed for exceeding its memory limit
  kSetupError,   // the sandbox could not be built or the command not started
};

const char* to_string(RunStatus status);

struct Result {
  RunStatus status = RunStatus::kSetupError;
  int exit_code = 0;          // the workload's exit code, or 128+signal
  std::optional<int> signal;  // the signal that ended the workload
  std::string stdout_data;
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  int64_t peak_memory_bytes = -1;  // -1: unknown (no memory cgroup)
  // Limits that ended or throttled the run: memory, pids, cpu, cpu_time,
  // wall_time, output, network_connections, network_bytes.
  std::vector<std::string> limits_hit;
  std::vector<std::string> warnings;  // e.g. a limit not enforced under best-effort
  // Calls the seccomp filter refused (answered EPERM), by name, with counts.
  std::map<std::string, uint64_t> denied_syscalls;
  // With network egress: every connection the proxy decided, and the totals.
  std::optional<EgressReport> network;
  std::vector<Artifact> artifacts;             // files the run left in <workspace>/out
  std::vector<std::string> artifacts_refused;  // what was not returned, and why
  std::string error;                           // setup failure as "step object: strerror"
  std::string fd3_data;                        // RunSpec::capture_fd3: what the workload wrote on fd 3
  bool fd3_truncated = false;

  // The code `nsbox run` exits with: the workload's, 128+signal, or 125/126/127
  // for setup failures (as env(1) and the shell do).
  int cli_exit_code() const { return exit_code; }
};

// The error of a run whose processes the kernel killed for memory that ran
// out outside it (status oom, "memory" not in limits_hit).
inline constexpr const char* kOomFromAbove =
    "memory ran out above the run (on the host, or in a cgroup that holds nsbox) and the kernel's OOM killer "
    "chose this run; its own memory limit was not reached";

nlohmann::ordered_json to_json(const Result& result);
nlohmann::ordered_json to_json(const EgressConnection& connection);
// The last line of the network section's `denials` once a run's requests
// passed its connection cap.
inline constexpr const char* kConnectionCapDenial = "further connections refused: the run's connection cap is reached";
// What a run's egress caps add to its limits_hit.
std::vector<std::string> egress_limits_hit(bool connection_cap_hit, bool byte_cap_hit);
// One line of the network section's `denials`: "HOST:PORT VERDICT: REASON".
std::string egress_denial(const std::string& host, uint16_t port, std::string_view verdict, const std::string& reason);
// A report's counts as its JSON names them: allowed, denied, failed and
// the bytes each way.
nlohmann::ordered_json egress_counts(const EgressReport& network);
nlohmann::ordered_json to_json(const EgressReport& network);

}  // namespace nsbox
