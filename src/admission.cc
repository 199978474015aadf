#include "nsbox/admission.h"

namespace nsbox {

Admission::Admission(uint32_t max_running, uint32_t max_queued) : max_running_(max_running), max_queued_(max_queued) {}

Admission::Verdict Admission::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) return Verdict::kClosed;
  // Nobody waiting: a free slot is taken at once. Otherwise the newcomer
  // queues behind the others, so slots go out in arrival order.
  if (waiters_.empty() && running_ < max_running_) {
    ++running_;
    return Verdict::kAdmitted;
  }
  if (waiters_.size() >= max_queued_) return Verdict::kFull;
  std::condition_variable turn;
  const auto me = waiters_.insert(waiters_.end(), &turn);
  turn.wait(lock, [&] { return closed_ || (waiters_.begin() == me && running_ < max_running_); });
  waiters_.erase(me);
  if (closed_) {
    wake_locked();  // wait_idle may be waiting for the queue to empty
    return Verdict::kClosed;
  }
  ++running_;
  wake_locked();  // the next waiter may fit too
  return Verdict::kAdmitted;
}

void Admission::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  --running_;
  wake_locked();
}

void Admission::wake_locked() {
  if (closed_) {
    for (auto* waiter : waiters_) waiter->notify_one();
  } else if (!waiters_.empty() && running_ < max_running_) {
    waiters_.front()->notify_one();
  }
  if (running_ == 0 && waiters_.empty()) idle_.notify_all();
}

void Admission::resize(uint32_t max_running, uint32_t max_queued) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_running_ = max_running;
  max_queued_ = max_queued;
  wake_locked();
}

void Admission::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  wake_locked();
}

bool Admission::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_until(lock, deadline, [&] { return running_ == 0 && waiters_.empty(); });
}

uint32_t Admission::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

uint32_t Admission::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint32_t>(waiters_.size());
}

bool TenantShares::try_take(const std::string& tenant, uint32_t most) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t& n = held_[tenant];
  if (most != 0 && n >= most) {
    if (n == 0) held_.erase(tenant);
    return false;
  }
  ++n;
  return true;
}

void TenantShares::give_back(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(tenant);
  if (it == held_.end()) return;
  if (--it->second == 0) held_.erase(it);
}

uint32_t TenantShares::held(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(tenant);
  return it == held_.end() ? 0 : it->second;
}

}  // namespace nsbox
