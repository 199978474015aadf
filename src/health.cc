#include "nsbox/health.h"

namespace nsbox {

bool SandboxHealth::degraded_locked(Clock::time_point now) const {
  return in_a_row_ >= kFailuresInARow && now - last_failed_at_ < kHold;
}

SandboxHealth::Change SandboxHealth::run_finished(bool got_sandbox, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (got_sandbox) {
    // Past the mark, even when the hold had lapsed: the log said degraded.
    const bool was_degraded = in_a_row_ >= kFailuresInARow;
    in_a_row_ = 0;
    return was_degraded ? Change::kRecovered : Change::kNone;
  }
  const bool was_degraded = degraded_locked(now);
  ++total_;
  ++in_a_row_;
  last_failed_at_ = now;
  return !was_degraded && degraded_locked(now) ? Change::kDegraded : Change::kNone;
}

std::optional<std::string> SandboxHealth::degraded(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  if (!degraded_locked(now)) return std::nullopt;
  // No error text: /health answers anyone, and the errors name tenants and
  // host paths. The node's log has them.
  return "the last " + std::to_string(in_a_row_) + " runs got no sandbox; the node's log says why";
}

uint64_t SandboxHealth::failures_total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace nsbox
