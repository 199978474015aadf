// Errors carry the failing step, the object it acted on and errno, so a user
// reads "pivot_root /var/lib/nsbox/rootfs/default: Invalid argument".
#pragma once

#include <stdexcept>
#include <string>

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

// "step object: strerror(err)"; object may be empty.
std::string format_sys_error(const std::string& step, const std::string& object, int err);

}  // namespace nsbox
