#include "nsbox/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <utility>

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

namespace {

std::string& node_id_storage() {
  static std::string id;
  return id;
}

}  // namespace

void set_audit_node_id(std::string id) { node_id_storage() = std::move(id); }

json event_record(const char* event) {
  json j;
  j["time"] = utc_timestamp();
  j["event"] = event;
  if (!node_id_storage().empty()) j["node"] = node_id_storage();
  return j;
}

namespace {

// How the tenant was known: "token" or "listener" (its anonymous tenant),
// null without a tenant.
json credential_of(const std::string& tenant, bool by_token) {
  return tenant.empty() ? json(nullptr) : json(by_token ? "token" : "listener");
}

}  // namespace

json run_started_record(const AuditContext& ctx) {
  json j = event_record("run_started");
  j["run_id"] = ctx.run_id;
  j["tenant"] = ctx.tenant;
  j["credential"] = credential_of(ctx.tenant, ctx.by_token);
  j["profile"] = ctx.profile;
  j["profile_sha256"] = ctx.profile_sha256;
  j["rootfs"] = ctx.rootfs;
  j["language"] = ctx.language;
  j["api"] = ctx.api;
  j["client"] = ctx.client;
  j["code_sha256"] = ctx.code_sha256;
  j["input_bytes"] = ctx.input_bytes;
  return j;
}

json audit_record(const AuditContext& ctx, const json& r) {
  auto get = [&](const char* key) { return r.contains(key) ? r[key] : json(nullptr); };
  json usage = r.contains("usage") ? r["usage"] : json::object();
  json j = event_record("run");
  j["run_id"] = ctx.run_id;
  j["tenant"] = ctx.tenant;
  j["credential"] = credential_of(ctx.tenant, ctx.by_token);
  j["profile"] = ctx.profile;
  j["profile_sha256"] = ctx.profile_sha256;
  j["rootfs"] = ctx.rootfs;
  j["language"] = ctx.language;
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
  j["limits"] = get("limits");
  // What left the sandbox, by size and digest (never content): the answer
  // (its return value), its output and its artifacts.
  j["answer_bytes"] = ctx.answer_bytes;
  for (const char* stream : {"stdout", "stderr"}) {
    const std::string name(stream);
    j[name + "_bytes"] = r.contains(stream) && r[stream].is_string()
                             ? json(r[stream].get_ref<const std::string&>().size())
                             : json(nullptr);
    j[name + "_truncated"] = r.value(name + "_truncated", false);
  }
  // A run names its artifacts: the record lists the first
  // kAuditArtifactsListed, names cut at kAuditFieldMax bytes, and counts the
  // rest, so that a run cannot make its record (and the disk it fills) as
  // large as it likes.
  json artifacts = json::array();
  uint64_t unlisted = 0;
  if (r.contains("artifacts") && r["artifacts"].is_array())
    for (const auto& a : r["artifacts"]) {
      if (artifacts.size() == kAuditArtifactsListed) {
        ++unlisted;
        continue;
      }
      json name = a.value("name", json(nullptr));
      if (name.is_string()) name = name.get<std::string>().substr(0, kAuditFieldMax);
      artifacts.push_back(
          {{"name", name}, {"size", a.value("size", json(nullptr))}, {"sha256", a.value("sha256", json(nullptr))}});
    }
  j["artifacts"] = std::move(artifacts);
  j["artifacts_unlisted"] = unlisted;
  j["artifacts_refused"] =
      r.contains("artifacts_refused") && r["artifacts_refused"].is_array() ? r["artifacts_refused"].size() : 0;
  // What the code tried and the filter refused: the first sign of an attack.
  j["denied_syscalls"] = r.contains("denied_syscalls") ? r["denied_syscalls"] : json::object();
  json network = r.contains("network") ? r["network"] : json(nullptr);
  if (network.is_object()) {
    // Bytes are null where the worker that counted them died (job_stream.h).
    j["network"] = {{"allowed", network.value("allowed", 0)},
                    {"denied", network.value("denied", 0)},
                    {"failed", network.value("failed", 0)},
                    {"bytes_sent", network.value("bytes_sent", json(0))},
                    {"bytes_received", network.value("bytes_received", json(0))}};
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
    json j = event_record("egress");
    // When the proxy decided, not when the run's end wrote the line.
    const json& decided = c.contains("time") ? c["time"] : json(nullptr);
    if (decided.is_string() && !decided.get_ref<const std::string&>().empty()) j["time"] = decided;
    j["run_id"] = ctx.run_id;
    j["tenant"] = ctx.tenant;
    for (const char* key : {"protocol", "host", "port", "address", "verdict", "reason", "bytes_sent", "bytes_received"})
      j[key] = c.value(key, json(nullptr));
    out.push_back(std::move(j));
  }
  return out;
}

json refusal_record(const RefusalContext& ctx) {
  json j = event_record("refused");
  j["client"] = ctx.client;
  auto cut = [](const std::string& text) { return text.substr(0, kAuditFieldMax); };
  j["method"] = ctx.method.empty() ? json(nullptr) : json(cut(ctx.method));  // none: cut before its head was read
  j["path"] = ctx.method.empty() ? json(nullptr) : json(cut(ctx.path));
  j["tenant"] = ctx.tenant.empty() ? json(nullptr) : json(ctx.tenant);
  j["credential"] = credential_of(ctx.tenant, ctx.by_token);
  j["status"] = ctx.status;
  j["reason"] = ctx.reason;
  j["message"] = cut(ctx.message);
  return j;
}

namespace {

// Counts one under key, naming at most kSuppressedClientsNamed keys.
void count_named(std::map<std::string, uint64_t>& named, uint64_t& others, const std::string& key) {
  if (named.count(key) || named.size() < kSuppressedClientsNamed)
    ++named[key];
  else
    ++others;
}

}  // namespace

bool RefusalBudget::take(Clock::time_point now, const std::string& client, const std::string& reason,
                         const std::string& tenant) {
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    anonymous_ = Window{};
    authenticated_ = Window{};
  }
  Window& window = tenant.empty() ? anonymous_ : authenticated_;
  const std::string& key = tenant.empty() ? client : tenant;
  const auto mine = window.used_by.find(key);
  const unsigned used_by_key = mine == window.used_by.end() ? 0 : mine->second;
  if (window.used < per_second_ && used_by_key < per_client_) {
    ++window.used;
    ++window.used_by[key];
    return true;
  }
  ++suppressed_.count;
  ++suppressed_.by_reason[reason];
  count_named(suppressed_.by_client, suppressed_.other_clients, client);
  if (!tenant.empty()) count_named(suppressed_.by_tenant, suppressed_.other_tenants, tenant);
  return false;
}

RefusalBudget::Suppressed RefusalBudget::take_suppressed() { return std::exchange(suppressed_, Suppressed{}); }

namespace {

// Opens (appends to) path, a regular file never reached through a symlink,
// made 0600 (it names tenants and code hashes); throws naming the path.
UniqueFd open_audit_file(const std::string& path) {
  // O_NONBLOCK: a FIFO at the path must not hold the node's start in open().
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd)
    throw std::runtime_error("audit_log " + path + ": " +
                             (errno == ENXIO ? "not a regular file (a FIFO without a reader)" : std::strerror(errno)));
  struct stat st {};
  std::string problem;
  if (::fstat(fd.get(), &st) != 0)
    problem = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    problem = "not a regular file";
  else if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0)
    problem = std::string("chmod 0600: ") + std::strerror(errno);
  else if (::fcntl(fd.get(), F_SETFL, O_APPEND) != 0)
    problem = std::string("fcntl: ") + std::strerror(errno);
  if (!problem.empty()) throw std::runtime_error("audit_log " + path + ": " + problem);
  return fd;
}

// Whether the file of fd has no name left: records written to it would be
// gone with the last descriptor.
bool deleted(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_nlink == 0;
}

}  // namespace

AuditLog::AuditLog(const std::string& path) : path_(path) {
  if (!path.empty()) fd_ = open_audit_file(path);
}

AuditLog::~AuditLog() {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
  if (lost_ > 0) append_locked("");  // one more try to say what was lost
}

bool AuditLog::write(const json& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
  return write_locked(record);
}

void AuditLog::refused(const json& record, RefusalBudget::Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Only a token names the tenant for the budget: a listener's anonymous
  // tenant is whoever reaches it, counted by address.
  const bool by_token = record.value("credential", json(nullptr)) == "token";
  const json& tenant = record.contains("tenant") ? record["tenant"] : json(nullptr);
  if (!refusals_.take(now, record.value("client", ""), record.value("reason", ""),
                      by_token && tenant.is_string() ? tenant.get<std::string>() : ""))
    return;
  write_suppressed_locked();
  write_locked(record);
}

void AuditLog::write_suppressed() {
  std::lock_guard<std::mutex> lock(mutex_);
  write_suppressed_locked();
}

bool AuditLog::writable() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !fd_ || (lost_ == 0 && !deleted(fd_.get())) || append_locked("");
}

void AuditLog::take_lost_from(AuditLog& previous) {
  if (&previous == this) return;
  std::scoped_lock lock(mutex_, previous.mutex_);
  if (!fd_ || !previous.fd_) return;
  struct stat mine {
  }, theirs{};
  const bool same_file = ::fstat(fd_.get(), &mine) == 0 && ::fstat(previous.fd_.get(), &theirs) == 0 &&
                         mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
  if (same_file) line_cut_ = std::exchange(previous.line_cut_, false);  // reopened, not rotated: end its line
  if (previous.lost_ == 0) return;
  lost_ += std::exchange(previous.lost_, 0);
  last_errno_ = previous.last_errno_;
}

std::string AuditLog::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_ == 0 && !failing_ ? std::string() : std::strerror(last_errno_);
}

void AuditLog::write_suppressed_locked() {
  const RefusalBudget::Suppressed suppressed = refusals_.take_suppressed();
  if (suppressed.count == 0) return;
  json j = event_record("refusals_suppressed");
  j["count"] = suppressed.count;
  j["by_reason"] = suppressed.by_reason;
  j["by_client"] = suppressed.by_client;
  j["other_clients"] = suppressed.other_clients;
  j["by_tenant"] = suppressed.by_tenant;
  j["other_tenants"] = suppressed.other_tenants;
  write_locked(j);
}

bool AuditLog::write_locked(const json& record) {
  if (!fd_) return true;
  // ASCII only: a client's bidi or line-separator characters arrive escaped,
  // so that no viewer of the file shows a record other than it is.
  if (append_locked(record.dump(-1, ' ', true, json::error_handler_t::replace) + "\n")) return true;
  ++lost_;
  ++lost_in_process_;
  return false;
}

uint64_t AuditLog::records_lost_in_process() { return lost_in_process_.load(); }

// Appends line (may be empty) in one write, after what a failure left to
// say: the end of a cut line, and how many records were lost.
bool AuditLog::append_locked(std::string line) {
  std::string text;
  if (deleted(fd_.get())) {
    // Someone removed the file: what is written to it now would be lost
    // unseen. A new one is made at the path, and its first line says why.
    try {
      fd_ = open_audit_file(path_);
    } catch (const std::exception& e) {
      last_errno_ = errno ? errno : EIO;  // open's, before anything else can change it
      if (lost_ == 0) spdlog::error("{}: records are lost until it can be written", e.what());
      failing_ = true;
      return false;
    }
    spdlog::warn("audit log {} was deleted; made anew", path_);
    line_cut_ = false;  // the cut line was in the deleted file
    json j = event_record("audit_log_recreated");
    j["reason"] = "the file was deleted while the node wrote to it";
    text += j.dump() + "\n";
  }
  if (line_cut_) text += "\n";
  if (lost_ > 0) {
    json j = event_record("audit_records_lost");
    j["count"] = lost_;
    j["error"] = std::strerror(last_errno_);
    text += j.dump() + "\n";
  }
  const size_t said_before_line = text.size();  // what ends a cut line and says what was lost
  text += line;
  if (text.empty()) return true;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    if (lost_ == 0)
      spdlog::error("audit log {}: {}: records are lost until it can be written", path_, std::strerror(err));
    last_errno_ = err;
    failing_ = true;
    if (done > 0) line_cut_ = text[done - 1] != '\n';
    if (done >= said_before_line) lost_ = 0;  // that much is said; not twice
    return false;
  }
  if (lost_ > 0) spdlog::warn("audit log {}: written again after {} records were lost", path_, lost_);
  line_cut_ = false;
  lost_ = 0;
  failing_ = false;
  return true;
}

}  // namespace nsbox
