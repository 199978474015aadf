// The audit log: one JSON line per run, for security teams (who ran what,
// under which profile, what it used, how it ended), and one per request the
// node refused (who asked for what, and why not), in a file of its own;
// operational logs go elsewhere (spdlog) and carry the same run id.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nsbox/unique_fd.h"

namespace nsbox {

struct AuditContext {
  std::string run_id;
  std::string tenant;
  bool by_token = false;  // the tenant by its token, not as a listener's anonymous tenant
  std::string api;        // "run" (the platform's /run) or "v1" (/v1/runs)
  std::string client;     // the peer address
  std::string code_sha256;
  std::string profile_sha256;  // of the profile as the run used it (a reload may change it, not its name)
  std::string rootfs;          // the tree the run's root was made of: its rootfs path resolved
  std::string profile;         // the profile's name, as the node gave the job to the spawner
  std::string language;
  uint64_t input_bytes = 0;   // the inputs object as JSON
  double duration_s = 0;      // admission to result
  uint64_t answer_bytes = 0;  // the answer's body: the return value, or the whole result (/v1/runs)
  // Who ended a run the node stopped: "client_closed" (its client went
  // away), "node_stopping" (past the grace period), or null.
  const char* killed_by = nullptr;
};

// {"time", "event", "node"}: the start of every record. "node" is the id of
// the node process that wrote it (set_audit_node_id), absent until set.
nlohmann::ordered_json event_record(const char* event);
// Names this process's node in every record from now on: records of nodes
// sharing a log, or of a node's successive starts, can be told apart.
void set_audit_node_id(std::string id);

// {"time", "event": "run_started", "run_id", "tenant", "credential", "profile",
//  "profile_sha256", "rootfs", "language", "api", "client", "code_sha256",
//  "input_bytes"}: written as the run is given its sandbox, so that a run
//  the node does not live to finish is on record.
nlohmann::ordered_json run_started_record(const AuditContext& ctx);

// {"time", "event": "run", "run_id", "tenant", "credential", "profile", "profile_sha256", "rootfs", "language", "api",
//  "client",
//  "code_sha256", "input_bytes", "status", "error_type", "exit_code",
//  "signal", "killed_by", "duration_ms", "wall_ms", "cpu_ms", "peak_memory_bytes",
//  "limits_hit", "warnings", "limits", "answer_bytes", "stdout_bytes",
//  "stdout_truncated", "stderr_bytes", "stderr_truncated", "artifacts" (name
//  cut at kAuditFieldMax bytes, size, sha256 each; the first
//  kAuditArtifactsListed), "artifacts_unlisted" (the rest, a count),
//  "artifacts_refused" (a count), "denied_syscalls",
//  "network"} from the worker's result; network is null or the egress totals.
//  profile and language are the context's: a worker that died has no result
//  to name them.
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
  std::string tenant;     // empty: not (yet) authenticated
  bool by_token = false;  // the tenant by its token, not as a listener's anonymous tenant
  int status = 0;
  std::string reason;   // as in nsbox_rejected_requests_total
  std::string message;  // what the client was told
};

// {"time", "event": "refused", "client", "method", "path", "tenant",
//  "credential", "status", "reason", "message"}; tenant is null when the
//  request was not authenticated, credential "token" (the tenant's token
//  was sent), "listener" (the listener's anonymous tenant) or null; method, path and message are cut at kAuditFieldMax
//  bytes (a message may echo what the client sent). Never a header's value: a wrong token stays out of the log.
nlohmann::ordered_json refusal_record(const RefusalContext& ctx);
inline constexpr size_t kAuditFieldMax = 256;
// Artifacts a run record lists; the rest are counted in artifacts_unlisted.
inline constexpr size_t kAuditArtifactsListed = 256;

// How many refusal lines one second of the audit log may hold: anyone who
// reaches a listener can be refused, and must not be able to fill the disk;
// and of those how many one client may take, so that one client's flood
// leaves room for the others' refusals. Refusals of requests that sent a
// tenant's token have a second budget of their own, shared out by tenant,
// not by address (behind a gateway every request has one address): a flood
// of requests without a token cannot take the lines that name a tenant
// (anonymous requests a listener runs as its tenant count by address).
inline constexpr unsigned kRefusalLinesPerSecond = 20;
inline constexpr unsigned kRefusalLinesPerClientPerSecond = 5;
// Clients (and tenants) named in one refusals_suppressed line; the rest are counted.
inline constexpr size_t kSuppressedClientsNamed = 32;

// Fixed one-second windows of refusal lines; those past their budget, or
// past their client's (or tenant's) share of it, are counted by reason,
// client and tenant.
class RefusalBudget {
 public:
  using Clock = std::chrono::steady_clock;
  RefusalBudget(unsigned per_second, unsigned per_client) : per_second_(per_second), per_client_(per_client) {}
  // True when a refusal of client (as tenant, "" when not authenticated)
  // at now may be written; otherwise it is counted.
  bool take(Clock::time_point now, const std::string& client = "", const std::string& reason = "",
            const std::string& tenant = "");
  struct Suppressed {
    uint64_t count = 0;
    std::map<std::string, uint64_t> by_reason;
    std::map<std::string, uint64_t> by_client;  // at most kSuppressedClientsNamed
    uint64_t other_clients = 0;                 // refusals of clients past those
    std::map<std::string, uint64_t> by_tenant;  // authenticated ones, at most kSuppressedClientsNamed
    uint64_t other_tenants = 0;
  };
  // The refusals counted since the last call; the count starts again at 0.
  Suppressed take_suppressed();

 private:
  struct Window {
    unsigned used = 0;
    std::map<std::string, unsigned> used_by;  // by client or tenant, at most per_second_ keys
  };
  unsigned per_second_;
  unsigned per_client_;
  Clock::time_point window_start_{};
  Window anonymous_;      // shared out by client address
  Window authenticated_;  // shared out by tenant
  Suppressed suppressed_;
};

// "2026-11-30T06:24:01.123Z"
std::string utc_timestamp();

class AuditLog {
 public:
  // Opens (appends to) path, a regular file never reached through a
  // symlink, and makes it 0600 (it names tenants and code hashes); throws
  // std::runtime_error naming the path. An empty path: records are dropped
  // (no audit file configured).
  explicit AuditLog(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Thread-safe. Each record is one write(2) of its line, so a crash of the
  // node loses nothing written and no two records share a line. A record
  // the file would not take (a full disk) is counted as lost, and the next
  // line that is written says how many were, in
  // {"event": "audit_records_lost", "count", "error"}; a line cut short by
  // the failure is ended first, so it cannot run into the next record.
  // A file deleted under the node is made anew at its path before the next
  // record, which follows an {"event": "audit_log_recreated"} line.
  // True when the record is in the file (or no file is configured).
  bool write(const nlohmann::ordered_json& record);
  // A refusal line, within kRefusalLinesPerSecond and its client's
  // kRefusalLinesPerClientPerSecond; those past them are counted and said
  // in one {"event": "refusals_suppressed", "count", "by_reason",
  // "by_client", "other_clients", "by_tenant", "other_tenants"} line,
  // written before the next line of
  // any kind or when the log is closed.
  void refused(const nlohmann::ordered_json& record,
               RefusalBudget::Clock::time_point now = RefusalBudget::Clock::now());
  // Writes the refusals_suppressed line now, if any were counted: the node
  // calls it each second, so a flood that stops is not left unsaid.
  void write_suppressed();
  // Whether records reach the file: true without a file, or when the last
  // write did and the file still has a name (else it is made anew). After a failure, tries again to write the line that
  // says what was lost (the node refuses runs until one gets through).
  bool writable();
  // Why the last write failed ("" when it did not).
  std::string failure() const;
  // Takes over what previous lost and has not said yet (a reload's new log
  // says it in its first line, as previous would have).
  void take_lost_from(AuditLog& previous);
  // Records no audit log of this process could write, reloads included.
  static uint64_t records_lost_in_process();
  const std::string& path() const { return path_; }

 private:
  void write_suppressed_locked();
  bool write_locked(const nlohmann::ordered_json& record);
  bool append_locked(std::string line);

  std::string path_;
  UniqueFd fd_;
  mutable std::mutex mutex_;
  RefusalBudget refusals_{kRefusalLinesPerSecond, kRefusalLinesPerClientPerSecond};
  bool line_cut_ = false;  // the file ends inside a line a failed write began
  uint64_t lost_ = 0;      // records not written since the last that was
  int last_errno_ = 0;     // of the failure that lost them
  bool failing_ = false;   // the last attempt to write failed
  static inline std::atomic<uint64_t> lost_in_process_{0};
};

}  // namespace nsbox
