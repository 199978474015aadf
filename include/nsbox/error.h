// Errors carry the failing step, the object it acted on and errno, so a user
// reads "pivot_root /var/lib/nsbox/rootfs/default: Invalid argument".
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace nsbox {

class SysError : public std::runtime_error {
 public:
  SysError(std::string step, std::string object, int err);
  const std::string& step() const { return step_; }
  const std::string& object() const { return object_; }
  int err() const { return err_; }

 private:
  std::string step_;
  std::string object_;
  int err_;
};

// A bad request, flag or profile: not a system failure, no errno.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The host (its kernel, or a filter or policy nsbox runs under) lacks what
// nsbox needs to build any sandbox: neither a retry nor a restart helps.
class HostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "step object: strerror(err)"; object may be empty.
std::string format_sys_error(const std::string& step, const std::string& object, int err);

// Text as a terminal or log may show it: each C0 control character, DEL and
// C1 control (U+0080..U+009F, which some terminals obey) becomes '?', so
// that a value quoted in an error cannot move the cursor or set a title.
std::string printable(std::string_view text);

}  // namespace nsbox
