// The node's counters, rendered in the Prometheus text format for
// GET /metrics. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace nsbox {

class Metrics {
 public:
  // Upper bounds of the latency histogram, in seconds.
  static constexpr std::array<double, 12> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  // One finished run: status is the result's (ok, error, timeout, oom, killed).
  void run_finished(const std::string& tenant, const std::string& language, const std::string& status, double seconds);
  // A run's egress totals (its Result's `network`, or null without egress).
  void egress_finished(const std::string& tenant, const nlohmann::ordered_json& network);
  // A request refused before any sandbox: overload, unauthorized, forbidden
  // (a browser page from an unlisted origin), too_large,
  // bad_request, shutting_down.
  void rejected(const std::string& reason);

  struct Gauges {
    uint32_t running = 0;
    uint32_t queued = 0;
    uint32_t max_running = 0;
    uint32_t max_queued = 0;
    uint64_t audit_records_lost = 0;
    uint64_t answers_reset = 0;
    uint64_t sandbox_failures = 0;
    struct Pool {
      uint64_t idle = 0, starting = 0, idle_memory_bytes = 0, hits = 0, waits = 0, misses = 0, refills = 0,
               refill_ms_total = 0, retired = 0, fork_servers = 0;
    } pool;
  };
  std::string render(const Gauges& gauges) const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> runs_;
  std::map<std::string, Histogram> latency_;  // by language
  std::map<std::string, uint64_t> rejected_;
  std::map<std::pair<std::string, std::string>, uint64_t> egress_connections_;  // tenant, verdict
  std::map<std::pair<std::string, std::string>, uint64_t> egress_bytes_;        // tenant, direction
  uint64_t oom_kills_ = 0;
  uint64_t timeouts_ = 0;
};

}  // namespace nsbox
