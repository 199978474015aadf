// The audit log: one JSON line per run, for security teams (who ran what,
// under which profile, what it used, how it ended). Written with spdlog to a
// file of its own; operational logs go elsewhere and carry the same run id.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spdlog {
class logger;
}

namespace nsbox {

struct AuditContext {
  std::string run_id;
  std::string tenant;
  std::string api;     // "run" (the platform's /run) or "v1" (/v1/runs)
  std::string client;  // the peer address
  std::string code_sha256;
  uint64_t input_bytes = 0;  // the inputs object as JSON
  double duration_s = 0;     // admission to result
};

// {"time", "event": "run", "run_id", "tenant", "profile", "language", "api", "client",
//  "code_sha256", "input_bytes", "status", "error_type", "exit_code",
//  "signal", "duration_ms", "wall_ms", "cpu_ms", "peak_memory_bytes",
//  "limits_hit", "warnings", "denied_syscalls", "network"} from the worker's
//  result; network is null or the egress totals.
nlohmann::ordered_json audit_record(const AuditContext& ctx, const nlohmann::ordered_json& result);

// One line per connection the run's egress proxy decided: {"time", "event":
// "egress", "run_id", "tenant", "protocol", "host", "port", "address",
// "verdict", "reason", "bytes_sent", "bytes_received"}.
std::vector<nlohmann::ordered_json> egress_audit_records(const AuditContext& ctx, const nlohmann::ordered_json& result);

// "2026-11-30T06:24:01.123Z"
std::string utc_timestamp();

class AuditLog {
 public:
  // Opens (appends to) path, mode 0600; throws std::runtime_error naming the
  // path. An empty path: records are dropped (no audit file configured).
  explicit AuditLog(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Thread-safe; flushed per line so a crash loses nothing written.
  void write(const nlohmann::ordered_json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace nsbox
