// Whether the node can still give its runs a sandbox, for GET /health.
//
// A run that got none (error_type "sandbox": its sandbox could not be set
// up, or its worker died) counts; a run that got one, whatever its code
// then did, ends the count. kFailuresInARow in a row make the node
// degraded: /health answers 503, so a balancer sends runs elsewhere and
// an operator is told (the log says why), while the node still tries
// every run it is sent. A node nothing reaches cannot learn it was mended: the
// state holds for kHold after the last failure, then /health says ok
// again and the next runs find out.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace nsbox {

class SandboxHealth {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kFailuresInARow = 5;
  static constexpr std::chrono::seconds kHold{30};

  enum class Change { kNone, kDegraded, kRecovered };

  // Thread-safe. What changed, for the node's log (which names the run's
  // failure: kDegraded comes with the run that made the count).
  Change run_finished(bool got_sandbox, Clock::time_point now = Clock::now());
  // Thread-safe. Why the node is degraded, or nullopt: for /health, which
  // needs no token, so without the failures' text.
  std::optional<std::string> degraded(Clock::time_point now = Clock::now()) const;
  // Thread-safe. Runs that got no sandbox since the node started.
  uint64_t failures_total() const;

 private:
  bool degraded_locked(Clock::time_point now) const;

  mutable std::mutex mu_;
  uint32_t in_a_row_ = 0;
  uint64_t total_ = 0;
  Clock::time_point last_failed_at_{};
};

}  // namespace nsbox
