// Admission control for the node: at most N sandboxes run at once, at most Q
// requests wait for one, and everything beyond is refused at once (HTTP 429)
// rather than queued without bound.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>

namespace nsbox {

class Admission {
 public:
  enum class Verdict { kAdmitted, kFull, kClosed };

  Admission(uint32_t max_running, uint32_t max_queued);

  // Takes a slot, waiting in the queue (first come, first served) if a place
  // is free. kFull when both are taken, kClosed once close() was called
  // (also for waiters).
  Verdict acquire();
  void release();

  // New limits apply to the next acquire; running sandboxes are not touched.
  void resize(uint32_t max_running, uint32_t max_queued);
  // Refuses every acquire from now on.
  void close();
  // Waits until nothing runs or the deadline passes; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);

  uint32_t running() const;
  uint32_t queued() const;

 private:
  // Wakes the first waiter when a slot is free for it (it wakes the next in
  // turn), and wait_idle's callers when nothing runs or waits. Only those:
  // with 64 waiters, waking them all on every release costs more CPU than
  // the request it lets through.
  void wake_locked();

  mutable std::mutex mutex_;
  std::list<std::condition_variable*> waiters_;  // one per queued acquire, in arrival order
  std::condition_variable idle_;
  uint32_t max_running_;
  uint32_t max_queued_;
  uint32_t running_ = 0;
  bool closed_ = false;
};

// A held slot, released on destruction.
class AdmissionSlot {
 public:
  explicit AdmissionSlot(Admission& a) : admission_(&a) {}
  AdmissionSlot(const AdmissionSlot&) = delete;
  AdmissionSlot& operator=(const AdmissionSlot&) = delete;
  ~AdmissionSlot() { admission_->release(); }

 private:
  Admission* admission_;
};

// Each tenant's requests admitted at once (running or queued), against the
// tenant's own bound: one tenant cannot take every sandbox and queue place
// of the node. Thread-safe.
class TenantShares {
 public:
  // Counts one more of tenant's requests unless it already has `most`
  // (0: no bound of its own); false when it has.
  bool try_take(const std::string& tenant, uint32_t most);
  void give_back(const std::string& tenant);
  uint32_t held(const std::string& tenant) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, uint32_t> held_;  // only tenants with requests in
};

class TenantShare {
 public:
  TenantShare(TenantShares& shares, std::string tenant) : shares_(&shares), tenant_(std::move(tenant)) {}
  TenantShare(const TenantShare&) = delete;
  TenantShare& operator=(const TenantShare&) = delete;
  ~TenantShare() { shares_->give_back(tenant_); }

 private:
  TenantShares* shares_;
  std::string tenant_;
};

}  // namespace nsbox
