// Capture of the workload's stdout/stderr up to a cap. Beyond the cap the
// pipe is still drained (so the workload never blocks on a full pipe) and the
// capture is flagged as truncated.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "nsbox/unique_fd.h"

namespace nsbox {

class OutputCapture {
 public:
  OutputCapture(UniqueFd fd, uint64_t cap);

  int fd() const { return fd_.get(); }
  bool open() const { return fd_.valid(); }
  // Reads what is available; closes the fd at EOF. Throws SysError.
  void on_readable();
  void close() { fd_.reset(); }

  std::string& data() { return data_; }
  bool truncated() const { return truncated_; }

  // Past the cap, what comes is dropped at a pace: about 1 MiB each
  // kDiscardPace, then the fd rests while the pipe fills and the writer
  // waits, so a run flooding its output cannot make nsbox spend as much
  // CPU as the run. Below the cap, small reads are paced alike (at most
  // 16 in each kDiscardPace): a run writing a byte at a time would wake
  // nsbox for each, and while the fd rests its bytes gather in the pipe.
  static constexpr std::chrono::milliseconds kDiscardPace{10};
  // Whether to leave the fd unread until rest_until().
  bool resting(std::chrono::steady_clock::time_point now) const { return now < rest_until_; }
  std::chrono::steady_clock::time_point rest_until() const { return rest_until_; }

 private:
  UniqueFd fd_;
  uint64_t cap_;
  std::string data_;
  void pace_discarding(ssize_t discarded);
  void pace_small_reads(ssize_t n);
  bool window_full(uint64_t bytes);

  bool truncated_ = false;
  bool pipe_enlarged_ = false;
  std::chrono::steady_clock::time_point rest_until_{};
  std::chrono::steady_clock::time_point window_end_{};  // of the current pace window
  uint64_t window_bytes_ = 0;
  int window_wakes_ = 0;
};

// Whether fd has an event now, without waiting: data or end of file to
// read, a pidfd whose process ended.
bool readable_now(int fd);

// Milliseconds from now until t, rounded up, as poll(2) takes them: 0 once
// t has passed.
int ms_until(std::chrono::steady_clock::time_point t);

// Reads exactly size bytes unless EOF comes first; returns the count read.
size_t read_full(int fd, void* buf, size_t size);

// Writes all of data; throws SysError(step, object, errno), EPIPE for a
// peer that is gone. A socket never raises SIGPIPE (MSG_NOSIGNAL); a pipe
// does unless the caller ignores it (the node and the spawner do).
void write_full(int fd, std::string_view data, const char* step, const char* object);
// The same on a stream socket that may stay full (a stopped reader): false
// when deadline passes before all of data is written.
bool write_full_before(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline, const char* step,
                       const char* object);

// path with its symlinks resolved (realpath), or path as it is when that
// fails (it does not exist yet, a component cannot be searched).
std::string resolved_or_as_is(const std::string& path);

}  // namespace nsbox
