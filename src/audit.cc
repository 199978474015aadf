#include "nsbox/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <utility>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

namespace nsbox {

using json = nlohmann::ordered_json;

std::string utc_timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

json audit_record(const AuditContext& ctx, const json& r) {
  auto get = [&](const char* key) { return r.contains(key) ? r[key] : json(nullptr); };
  json usage = r.contains("usage") ? r["usage"] : json::object();
  json j;
  j["time"] = utc_timestamp();
  j["event"] = "run";
  j["run_id"] = ctx.run_id;
  j["tenant"] = ctx.tenant;
  j["profile"] = get("profile");
  j["language"] = get("language");
  j["api"] = ctx.api;
  j["client"] = ctx.client;
  j["code_sha256"] = ctx.code_sha256;
  j["input_bytes"] = ctx.input_bytes;
  j["status"] = get("status");
  j["error_type"] = get("error_type");
  j["exit_code"] = get("exit_code");
  j["signal"] = get("signal");
  j["killed_by"] = ctx.killed_by ? json(ctx.killed_by) : json(nullptr);
  j["duration_ms"] = std::llround(ctx.duration_s * 1000);
  j["wall_ms"] = usage.value("wall_ms", json(nullptr));
  j["cpu_ms"] = usage.value("cpu_ms", json(nullptr));
  j["peak_memory_bytes"] = usage.value("peak_memory_bytes", json(nullptr));
  j["limits_hit"] = r.contains("limits_hit") ? r["limits_hit"] : json::array();
  j["warnings"] = r.contains("warnings") ? r["warnings"] : json::array();
  // What the code tried and the filter refused: the first sign of an attack.
  j["denied_syscalls"] = r.contains("denied_syscalls") ? r["denied_syscalls"] : json::object();
  json network = r.contains("network") ? r["network"] : json(nullptr);
  if (network.is_object()) {
    j["network"] = {{"allowed", network.value("allowed", 0)},
                    {"denied", network.value("denied", 0)},
                    {"failed", network.value("failed", 0)},
                    {"bytes_sent", network.value("bytes_sent", 0)},
                    {"bytes_received", network.value("bytes_received", 0)}};
  } else {
    j["network"] = nullptr;
  }
  return j;
}

std::vector<json> egress_audit_records(const AuditContext& ctx, const json& r) {
  std::vector<json> out;
  if (!r.contains("network") || !r["network"].is_object()) return out;
  const json& connections = r["network"].value("connections", json::array());
  for (const auto& c : connections) {
    json j;
    j["time"] = utc_timestamp();
    j["event"] = "egress";
    j["run_id"] = ctx.run_id;
    j["tenant"] = ctx.tenant;
    for (const char* key : {"protocol", "host", "port", "address", "verdict", "reason", "bytes_sent", "bytes_received"})
      j[key] = c.value(key, json(nullptr));
    out.push_back(std::move(j));
  }
  return out;
}

json refusal_record(const RefusalContext& ctx) {
  json j;
  j["time"] = utc_timestamp();
  j["event"] = "refused";
  j["client"] = ctx.client;
  auto cut = [](const std::string& text) { return text.substr(0, kAuditFieldMax); };
  j["method"] = cut(ctx.method);
  j["path"] = cut(ctx.path);
  j["tenant"] = ctx.tenant.empty() ? json(nullptr) : json(ctx.tenant);
  j["status"] = ctx.status;
  j["reason"] = ctx.reason;
  j["message"] = cut(ctx.message);
  return j;
}

bool RefusalBudget::take(Clock::time_point now) {
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    used_ = 0;
  }
  if (used_ < per_second_) {
    ++used_;
    return true;
  }
  ++suppressed_;
  return false;
}

uint64_t RefusalBudget::take_suppressed() { return std::exchange(suppressed_, 0); }

AuditLog::AuditLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  // Created 0600 before spdlog opens it: the log names tenants and code hashes.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error("audit_log " + path + ": " + std::strerror(errno));
  ::close(fd);
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    logger_ = std::make_shared<spdlog::logger>("audit", std::move(sink));
  } catch (const spdlog::spdlog_ex& e) {
    throw std::runtime_error("audit_log " + path + ": " + e.what());
  }
  logger_->set_pattern("%v");
  logger_->set_level(spdlog::level::info);
  logger_->flush_on(spdlog::level::info);
}

AuditLog::~AuditLog() {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
}

void AuditLog::write(const json& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
  write_locked(record);
}

void AuditLog::refused(const json& record, RefusalBudget::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!refusals_.take(now)) return;
  write_suppressed_locked();
  write_locked(record);
}

void AuditLog::write_suppressed() {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
}

void AuditLog::write_suppressed_locked() {
  const uint64_t count = refusals_.take_suppressed();
  if (count == 0) return;
  json j;
  j["time"] = utc_timestamp();
  j["event"] = "refusals_suppressed";
  j["count"] = count;
  write_locked(j);
}

void AuditLog::write_locked(const json& record) {
  if (!logger_) return;
  logger_->info(record.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace nsbox
