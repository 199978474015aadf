#include "nsbox/caps.h"

#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "nsbox/error.h"

namespace nsbox {

CapabilityDrop::CapabilityDrop() : empty_(cap_init()), last_cap_(static_cast<int>(cap_max_bits()) - 1) {
  if (!empty_) throw SysError("cap_init", "empty capability set", errno);
}

CapabilityDrop::~CapabilityDrop() { cap_free(empty_); }

int CapabilityDrop::drop_bounding_and_lock(const char** step) const noexcept {
  for (int cap = 0; cap <= last_cap_; ++cap) {
    if (cap_drop_bound(static_cast<cap_value_t>(cap)) != 0 && errno != EINVAL) {
      *step = "drop bounding capability";
      return errno;
    }
  }
  if (cap_reset_ambient() != 0 && errno != EINVAL) {
    *step = "clear ambient capabilities";
    return errno;
  }
  // No fixups when uids change, no root magic on execve, no ambient raise, all locked.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                             SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                             SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
    *step = "lock securebits";
    return errno;
  }
  return 0;
}

int CapabilityDrop::clear_process_sets(const char** step) const noexcept {
  // The raw call, with the sets on the stack: no libcap state or lock is
  // touched, so the workload can make it while it shares PID 1's memory.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    *step = "clear capabilities";
    return errno;
  }
  return 0;
}

}  // namespace nsbox
