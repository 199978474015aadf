#include "nsbox/admission.h"

namespace nsbox {

Admission::Admission(uint32_t max_running, uint32_t max_queued)
    : max_running_(max_running), max_queued_(max_queued) {}

Admission::Verdict Admission::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) return Verdict::kClosed;
  // Nobody waiting: a free slot is taken at once. Otherwise the newcomer
  // queues behind the others, so slots go out in arrival order.
  if (queued_ == 0 && running_ < max_running_) {
    ++running_;
    return Verdict::kAdmitted;
  }
  if (queued_ >= max_queued_) return Verdict::kFull;
  const uint64_t ticket = next_ticket_++;
  ++queued_;
  changed_.wait(lock, [&] { return closed_ || (serving_ == ticket && running_ < max_running_); });
  --queued_;
  ++serving_;
  if (closed_) {
    changed_.notify_all();  // wait_idle may be waiting for the queue to empty
    return Verdict::kClosed;
  }
  ++running_;
  changed_.notify_all();  // the next ticket may fit too
  return Verdict::kAdmitted;
}

void Admission::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
  }
  changed_.notify_all();
}

void Admission::resize(uint32_t max_running, uint32_t max_queued) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    max_running_ = max_running;
    max_queued_ = max_queued;
  }
  changed_.notify_all();
}

void Admission::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

bool Admission::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return running_ == 0 && queued_ == 0; });
}

uint32_t Admission::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

uint32_t Admission::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_;
}

}  // namespace nsbox
