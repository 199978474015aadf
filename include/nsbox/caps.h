// Capabilities: the sandbox keeps none. The libcap state is prepared before
// clone; the child only makes the prctl/capset calls.
#pragma once

#include <sys/capability.h>

namespace nsbox {

class CapabilityDrop {
 public:
  CapabilityDrop();  // throws SysError
  ~CapabilityDrop();
  CapabilityDrop(const CapabilityDrop&) = delete;
  CapabilityDrop& operator=(const CapabilityDrop&) = delete;

  // Empties the bounding and ambient sets and locks the securebits so the
  // sandbox can never regain privilege through execve or setuid. Needs
  // CAP_SETPCAP (held in the fresh user namespace). Returns 0 or errno.
  int drop_bounding_and_lock(const char** step) const noexcept;
  // Clears effective, permitted and inheritable (and so ambient) with a raw
  // capset: it writes no memory but its own stack. Returns 0 or errno.
  int clear_process_sets(const char** step) const noexcept;

 private:
  cap_t empty_;
  int last_cap_;
};

}  // namespace nsbox
