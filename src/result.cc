#include "nsbox/result.h"

#include <nlohmann/json.hpp>

namespace nsbox {

const char* to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kOk:
      return "ok";
    case RunStatus::kExitNonzero:
      return "exit_nonzero";
    case RunStatus::kTimeout:
      return "timeout";
    case RunStatus::kKilled:
      return "killed";
    case RunStatus::kOom:
      return "oom";
    case RunStatus::kSetupError:
      return "setup_error";
  }
  return "unknown";
}

std::vector<std::string> egress_limits_hit(bool connection_cap_hit, bool byte_cap_hit) {
  std::vector<std::string> hit;
  if (connection_cap_hit) hit.push_back("network_connections");
  if (byte_cap_hit) hit.push_back("network_bytes");
  return hit;
}

std::string egress_denial(const std::string& host, uint16_t port, std::string_view verdict, const std::string& reason) {
  return host + ":" + std::to_string(port) + " " + std::string(verdict) + ": " + reason;
}

nlohmann::ordered_json to_json(const EgressConnection& c) {
  return {{"protocol", c.protocol},
          {"host", c.host},
          {"port", c.port},
          {"address", c.address},
          {"verdict", to_string(c.verdict)},
          {"reason", c.reason},
          {"bytes_sent", c.bytes_sent},
          {"bytes_received", c.bytes_received},
          {"time", c.time}};
}

nlohmann::ordered_json egress_counts(const EgressReport& n) {
  return {{"allowed", n.allowed},
          {"denied", n.denied},
          {"failed", n.failed},
          {"bytes_sent", n.bytes_sent},
          {"bytes_received", n.bytes_received}};
}

nlohmann::ordered_json to_json(const EgressReport& n) {
  using json = nlohmann::ordered_json;
  json j = egress_counts(n);
  j["connections"] = json::array();
  j["denials"] = json::array();
  for (const auto& c : n.connections) {
    j["connections"].push_back(to_json(c));
    if (c.verdict != EgressVerdict::kAllowed)
      j["denials"].push_back(egress_denial(c.host, c.port, to_string(c.verdict), c.reason));
  }
  if (n.connection_cap_hit) j["denials"].push_back(kConnectionCapDenial);
  return j;
}

nlohmann::ordered_json to_json(const Result& r) {
  using json = nlohmann::ordered_json;
  json j;
  j["status"] = to_string(r.status);
  j["exit_code"] = r.exit_code;
  j["signal"] = r.signal ? json(*r.signal) : json(nullptr);
  j["stdout"] = r.stdout_data;
  j["stderr"] = r.stderr_data;
  j["stdout_truncated"] = r.stdout_truncated;
  j["stderr_truncated"] = r.stderr_truncated;
  j["wall_ms"] = r.wall_ms;
  j["cpu_ms"] = r.cpu_ms;
  j["peak_memory_bytes"] = r.peak_memory_bytes >= 0 ? json(r.peak_memory_bytes) : json(nullptr);
  j["limits_hit"] = r.limits_hit;
  j["warnings"] = r.warnings;
  j["denied_syscalls"] = json::object();
  for (const auto& [name, count] : r.denied_syscalls) j["denied_syscalls"][name] = count;
  j["network"] = r.network ? to_json(*r.network) : json(nullptr);
  j["artifacts"] = json::array();
  for (const auto& a : r.artifacts)
    j["artifacts"].push_back({{"name", a.name}, {"size", a.size}, {"sha256", a.sha256}});
  j["artifacts_refused"] = r.artifacts_refused;
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  return j;
}

}  // namespace nsbox
