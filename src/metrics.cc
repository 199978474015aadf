#include "nsbox/metrics.h"

#include <sstream>

namespace nsbox {
namespace {

// Label values are tenant names, languages and fixed words, but escape them
// as the format requires anyway.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A count of a Result's section, or 0 where it is unknown (null: the worker
// that counted it died, job_stream.h).
uint64_t known_count(const nlohmann::ordered_json& section, const char* key) {
  const auto it = section.find(key);
  return it != section.end() && it->is_number_integer() ? it->get<uint64_t>() : 0;
}

// A run's relayed bytes one way (bytes_sent, bytes_received): its total, or
// where that is unknown (a relay was open when its worker died) what the
// connections whose relays ended carried.
uint64_t known_bytes(const nlohmann::ordered_json& network, const char* key) {
  const auto total = network.find(key);
  if (total != network.end() && total->is_number_integer()) return total->get<uint64_t>();
  uint64_t sum = 0;
  const auto connections = network.find("connections");
  if (connections != network.end() && connections->is_array())
    for (const auto& c : *connections) sum += known_count(c, key);
  return sum;
}

// The HELP and TYPE lines of a metric family.
void family(std::ostream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

// A family of one sample without labels.
template <typename T>
void single(std::ostream& out, const char* name, const char* type, const char* help, T value) {
  family(out, name, type, help);
  out << name << ' ' << value << '\n';
}

}  // namespace

void Metrics::run_finished(const std::string& tenant, const std::string& language, const std::string& status,
                           double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++runs_[{tenant, language, status}];
  Histogram& h = latency_[language];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++h.buckets[i];
  }
  ++h.count;
  h.sum += seconds;
  if (status == "oom") ++oom_kills_;
  if (status == "timeout") ++timeouts_;
}

void Metrics::egress_finished(const std::string& tenant, const nlohmann::ordered_json& network) {
  if (!network.is_object()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const char* verdict : {"allowed", "denied", "failed"})
    egress_connections_[{tenant, verdict}] += known_count(network, verdict);
  egress_bytes_[{tenant, "sent"}] += known_bytes(network, "bytes_sent");
  egress_bytes_[{tenant, "received"}] += known_bytes(network, "bytes_received");
}

void Metrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++rejected_[reason];
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  family(out, "nsbox_runs_total", "counter", "Runs finished, by tenant, language and status.");
  for (const auto& [key, n] : runs_) {
    const auto& [tenant, language, status] = key;
    out << "nsbox_runs_total{tenant=\"" << label(tenant) << "\",language=\"" << label(language) << "\",status=\""
        << label(status) << "\"} " << n << "\n";
  }
  family(out, "nsbox_run_duration_seconds", "histogram", "Time from admission to result, by language.");
  for (const auto& [language, h] : latency_) {
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      out << "nsbox_run_duration_seconds_bucket{language=\"" << label(language) << "\",le=\"" << kBuckets[i] << "\"} "
          << h.buckets[i] << "\n";
    }
    out << "nsbox_run_duration_seconds_bucket{language=\"" << label(language) << "\",le=\"+Inf\"} " << h.count << "\n";
    out << "nsbox_run_duration_seconds_sum{language=\"" << label(language) << "\"} " << h.sum << "\n";
    out << "nsbox_run_duration_seconds_count{language=\"" << label(language) << "\"} " << h.count << "\n";
  }
  family(out, "nsbox_egress_connections_total", "counter",
         "Connections the egress proxies decided, by tenant and verdict.");
  for (const auto& [key, n] : egress_connections_)
    out << "nsbox_egress_connections_total{tenant=\"" << label(key.first) << "\",verdict=\"" << key.second << "\"} "
        << n << "\n";
  family(out, "nsbox_egress_bytes_total", "counter", "Bytes relayed by the egress proxies, by tenant and direction.");
  for (const auto& [key, n] : egress_bytes_)
    out << "nsbox_egress_bytes_total{tenant=\"" << label(key.first) << "\",direction=\"" << key.second << "\"} " << n
        << "\n";
  single(out, "nsbox_sandboxes_running", "gauge", "Sandboxes running now.", g.running);
  single(out, "nsbox_sandboxes_max", "gauge", "Sandboxes allowed at once (limits.max_concurrent).", g.max_running);
  single(out, "nsbox_queue_depth", "gauge", "Requests waiting for a sandbox slot.", g.queued);
  single(out, "nsbox_queue_capacity", "gauge", "Requests allowed to wait (limits.queue_depth).", g.max_queued);
  single(out, "nsbox_pool_idle", "gauge", "Warm sandboxes ready and waiting.", g.pool.idle);
  single(out, "nsbox_pool_starting", "gauge", "Warm sandboxes being started.", g.pool.starting);
  single(out, "nsbox_pool_idle_memory_bytes", "gauge",
         "Memory the idle warm sandboxes hold (limits.pool_memory bounds it).", g.pool.idle_memory_bytes);
  single(out, "nsbox_pool_fork_servers", "gauge",
         "Fork servers serving (started and waiting for their requests); a key's warm sandboxes are forked once its "
         "fork server serves.",
         g.pool.fork_servers);
  single(out, "nsbox_pool_hits_total", "counter", "Runs given a warm sandbox ready and waiting.", g.pool.hits);
  single(out, "nsbox_pool_waits_total", "counter",
         "Runs given a warm sandbox still starting (none was ready); they wait for the rest of its start-up.",
         g.pool.waits);
  single(out, "nsbox_pool_misses_total", "counter",
         "Runs of a pooled profile that found no warm sandbox ready or starting.", g.pool.misses);
  single(out, "nsbox_pool_refills_total", "counter", "Warm sandboxes started.", g.pool.refills);
  single(out, "nsbox_pool_refill_seconds_total", "counter",
         "Time from starting a warm sandbox to its being ready, summed.",
         static_cast<double>(g.pool.refill_ms_total) / 1000);
  single(out, "nsbox_pool_retired_total", "counter", "Idle warm sandboxes dropped (reload, shutdown).", g.pool.retired);
  single(out, "nsbox_audit_records_lost_total", "counter",
         "Audit records the audit log's file would not take (a full disk); runs are refused while it fails.",
         g.audit_records_lost);
  single(out, "nsbox_answers_reset_total", "counter",
         "Answers whose client did not take them within limits.request_timeout: the connection was reset after "
         "the run had run.",
         g.answers_reset);
  single(out, "nsbox_sandbox_failures_total", "counter",
         "Runs that got no sandbox: its set-up failed, or its worker died (error_type sandbox).", g.sandbox_failures);
  single(out, "nsbox_oom_kills_total", "counter", "Runs ended out of memory (their limit, or memory above them).",
         oom_kills_);
  single(out, "nsbox_timeouts_total", "counter", "Runs killed at their wall-clock or CPU deadline.", timeouts_);
  family(out, "nsbox_rejected_requests_total", "counter", "Requests refused before any sandbox, by reason.");
  for (const char* reason :
       {"overload", "tenant_limit", "unauthorized", "forbidden", "too_large", "head_too_large", "timeout",
        "bad_request", "not_found", "shutting_down", "client_closed", "audit_unavailable", "internal_error"}) {
    auto it = rejected_.find(reason);
    out << "nsbox_rejected_requests_total{reason=\"" << reason << "\"} " << (it == rejected_.end() ? 0 : it->second)
        << "\n";
  }
  return out.str();
}

}  // namespace nsbox
