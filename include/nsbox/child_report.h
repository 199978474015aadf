// What the cloned child tells the supervisor over pipes. Plain structs written
// with one write(2): the child may make raw syscalls only (see child.h).
#pragma once

#include <cstdint>

namespace nsbox {

// A setup step that failed inside the sandbox, e.g. {"pivot_root", "/x", EINVAL}.
struct ChildFailure {
  char step[48];
  char object[4000];
  int32_t err;
};

// How the workload ended, sent by our PID 1 just before it exits.
struct InitReport {
  enum Kind : int32_t { kExited = 1, kSignaled = 2 };
  int32_t kind;
  int32_t value;  // exit code or signal number
  // 1: PID 1 was the last process of the pid namespace when the workload
  // ended, so the run is over before PID 1 (and the namespaces) are gone.
  int32_t alone;
};

// Writes a ChildFailure to fd. Async-signal-safe: no allocation, no locale.
void report_child_failure(int fd, const char* step, const char* object, int err) noexcept;

}  // namespace nsbox
