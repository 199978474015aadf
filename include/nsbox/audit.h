// The audit log: one JSON line per run, for security teams (who ran what,
// under which profile, what it used, how it ended), and one per request the
// node refused (who asked for what, and why not). Written with spdlog to a
// file of its own; operational logs go elsewhere and carry the same run id.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
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
  // Who ended a run the node stopped: "client_closed" (its client went
  // away), "node_stopping" (past the grace period), or null.
  const char* killed_by = nullptr;
};

// {"time", "event": "run", "run_id", "tenant", "profile", "language", "api", "client",
//  "code_sha256", "input_bytes", "status", "error_type", "exit_code",
//  "signal", "killed_by", "duration_ms", "wall_ms", "cpu_ms", "peak_memory_bytes",
//  "limits_hit", "warnings", "denied_syscalls", "network"} from the worker's
//  result; network is null or the egress totals.
nlohmann::ordered_json audit_record(const AuditContext& ctx, const nlohmann::ordered_json& result);

// One line per connection the run's egress proxy decided: {"time", "event":
// "egress", "run_id", "tenant", "protocol", "host", "port", "address",
// "verdict", "reason", "bytes_sent", "bytes_received"}.
std::vector<nlohmann::ordered_json> egress_audit_records(const AuditContext& ctx, const nlohmann::ordered_json& result);

// A request the node answered without running it.
struct RefusalContext {
  std::string client;  // the peer address
  std::string method;
  std::string path;
  std::string tenant;  // empty: not (yet) authenticated
  int status = 0;
  std::string reason;   // as in nsbox_rejected_requests_total
  std::string message;  // what the client was told
};

// {"time", "event": "refused", "client", "method", "path", "tenant",
//  "status", "reason", "message"}; tenant is null when the request was not
//  authenticated; method, path and message are cut at kAuditFieldMax bytes
//  (a message may echo what the client sent). Never a header's value: a
//  wrong token stays out of the log.
nlohmann::ordered_json refusal_record(const RefusalContext& ctx);
inline constexpr size_t kAuditFieldMax = 256;

// How many refusal lines one second of the audit log may hold: anyone who
// reaches a listener can be refused, and must not be able to fill the disk.
inline constexpr unsigned kRefusalLinesPerSecond = 20;

// A fixed one-second window of refusal lines; those past its budget are
// counted, not written.
class RefusalBudget {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RefusalBudget(unsigned per_second) : per_second_(per_second) {}
  // True when a refusal at now may be written; otherwise it is counted.
  bool take(Clock::time_point now);
  // The refusals counted since the last call; the count starts again at 0.
  uint64_t take_suppressed();

 private:
  unsigned per_second_;
  Clock::time_point window_start_{};
  unsigned used_ = 0;
  uint64_t suppressed_ = 0;
};

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
  // A refusal line, within kRefusalLinesPerSecond; those past it are counted
  // and said in one {"event": "refusals_suppressed", "count"} line, written
  // before the next line of any kind or when the log is closed.
  void refused(const nlohmann::ordered_json& record,
               RefusalBudget::Clock::time_point now = RefusalBudget::Clock::now());
  // Writes the refusals_suppressed line now, if any were counted: the node
  // calls it each second, so a flood that stops is not left unsaid.
  void write_suppressed();
  const std::string& path() const { return path_; }

 private:
  void write_suppressed_locked();
  void write_locked(const nlohmann::ordered_json& record);

  std::string path_;
  std::shared_ptr<spdlog::logger> logger_;
  std::mutex mutex_;
  RefusalBudget refusals_{kRefusalLinesPerSecond};
};

}  // namespace nsbox
