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

}  // namespace

void Metrics::run_finished(const std::string& tenant, const std::string& language,
                           const std::string& status, double seconds) {
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
    egress_connections_[{tenant, verdict}] += network.value(verdict, uint64_t{0});
  egress_bytes_[{tenant, "sent"}] += network.value("bytes_sent", uint64_t{0});
  egress_bytes_[{tenant, "received"}] += network.value("bytes_received", uint64_t{0});
}

void Metrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++rejected_[reason];
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "# HELP nsbox_runs_total Runs finished, by tenant, language and status.\n"
         "# TYPE nsbox_runs_total counter\n";
  for (const auto& [key, n] : runs_) {
    const auto& [tenant, language, status] = key;
    out << "nsbox_runs_total{tenant=\"" << label(tenant) << "\",language=\"" << label(language)
        << "\",status=\"" << label(status) << "\"} " << n << "\n";
  }
  out << "# HELP nsbox_run_duration_seconds Time from admission to result, by language.\n"
         "# TYPE nsbox_run_duration_seconds histogram\n";
  for (const auto& [language, h] : latency_) {
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      out << "nsbox_run_duration_seconds_bucket{language=\"" << label(language) << "\",le=\""
          << kBuckets[i] << "\"} " << h.buckets[i] << "\n";
    }
    out << "nsbox_run_duration_seconds_bucket{language=\"" << label(language) << "\",le=\"+Inf\"} "
        << h.count << "\n";
    out << "nsbox_run_duration_seconds_sum{language=\"" << label(language) << "\"} " << h.sum << "\n";
    out << "nsbox_run_duration_seconds_count{language=\"" << label(language) << "\"} " << h.count << "\n";
  }
  out << "# HELP nsbox_egress_connections_total Connections the egress proxies decided, by tenant and verdict.\n"
         "# TYPE nsbox_egress_connections_total counter\n";
  for (const auto& [key, n] : egress_connections_)
    out << "nsbox_egress_connections_total{tenant=\"" << label(key.first) << "\",verdict=\"" << key.second << "\"} "
        << n << "\n";
  out << "# HELP nsbox_egress_bytes_total Bytes relayed by the egress proxies, by tenant and direction.\n"
         "# TYPE nsbox_egress_bytes_total counter\n";
  for (const auto& [key, n] : egress_bytes_)
    out << "nsbox_egress_bytes_total{tenant=\"" << label(key.first) << "\",direction=\"" << key.second << "\"} "
        << n << "\n";
  out << "# HELP nsbox_sandboxes_running Sandboxes running now.\n"
         "# TYPE nsbox_sandboxes_running gauge\n"
      << "nsbox_sandboxes_running " << g.running << "\n"
      << "# HELP nsbox_sandboxes_max Sandboxes allowed at once (limits.max_concurrent).\n"
         "# TYPE nsbox_sandboxes_max gauge\n"
      << "nsbox_sandboxes_max " << g.max_running << "\n"
      << "# HELP nsbox_queue_depth Requests waiting for a sandbox slot.\n"
         "# TYPE nsbox_queue_depth gauge\n"
      << "nsbox_queue_depth " << g.queued << "\n"
      << "# HELP nsbox_queue_capacity Requests allowed to wait (limits.queue_depth).\n"
         "# TYPE nsbox_queue_capacity gauge\n"
      << "nsbox_queue_capacity " << g.max_queued << "\n"
      << "# HELP nsbox_pool_idle Warm sandboxes ready and waiting.\n"
         "# TYPE nsbox_pool_idle gauge\n"
      << "nsbox_pool_idle " << g.pool.idle << "\n"
      << "# HELP nsbox_pool_starting Warm sandboxes being started.\n"
         "# TYPE nsbox_pool_starting gauge\n"
      << "nsbox_pool_starting " << g.pool.starting << "\n"
      << "# HELP nsbox_pool_idle_memory_bytes Memory the idle warm sandboxes hold (limits.pool_memory bounds it).\n"
         "# TYPE nsbox_pool_idle_memory_bytes gauge\n"
      << "nsbox_pool_idle_memory_bytes " << g.pool.idle_memory_bytes << "\n"
      << "# HELP nsbox_pool_hits_total Runs given a warm sandbox.\n"
         "# TYPE nsbox_pool_hits_total counter\n"
      << "nsbox_pool_hits_total " << g.pool.hits << "\n"
      << "# HELP nsbox_pool_misses_total Runs of a pooled profile that found no warm sandbox ready.\n"
         "# TYPE nsbox_pool_misses_total counter\n"
      << "nsbox_pool_misses_total " << g.pool.misses << "\n"
      << "# HELP nsbox_pool_refills_total Warm sandboxes started.\n"
         "# TYPE nsbox_pool_refills_total counter\n"
      << "nsbox_pool_refills_total " << g.pool.refills << "\n"
      << "# HELP nsbox_pool_refill_seconds_total Time from starting a warm sandbox to its being ready, summed.\n"
         "# TYPE nsbox_pool_refill_seconds_total counter\n"
      << "nsbox_pool_refill_seconds_total " << static_cast<double>(g.pool.refill_ms_total) / 1000 << "\n"
      << "# HELP nsbox_pool_retired_total Idle warm sandboxes dropped (reload, shutdown).\n"
         "# TYPE nsbox_pool_retired_total counter\n"
      << "nsbox_pool_retired_total " << g.pool.retired << "\n"
      << "# HELP nsbox_oom_kills_total Runs killed for exceeding their memory limit.\n"
         "# TYPE nsbox_oom_kills_total counter\n"
      << "nsbox_oom_kills_total " << oom_kills_ << "\n"
      << "# HELP nsbox_timeouts_total Runs killed at their wall-clock or CPU deadline.\n"
         "# TYPE nsbox_timeouts_total counter\n"
      << "nsbox_timeouts_total " << timeouts_ << "\n"
      << "# HELP nsbox_rejected_requests_total Requests refused before any sandbox, by reason.\n"
         "# TYPE nsbox_rejected_requests_total counter\n";
  for (const char* reason : {"overload", "unauthorized", "too_large", "bad_request", "shutting_down"}) {
    auto it = rejected_.find(reason);
    out << "nsbox_rejected_requests_total{reason=\"" << reason << "\"} "
        << (it == rejected_.end() ? 0 : it->second) << "\n";
  }
  return out.str();
}

}  // namespace nsbox
