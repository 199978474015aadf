// The supervisor: turns a RunSpec into a running sandbox and a Result.
#pragma once

#include <sched.h>

#include "nsbox/caps.h"
#include "nsbox/result.h"
#include "nsbox/run_spec.h"
#include "nsbox/seccomp.h"
#include "nsbox/userns.h"

namespace nsbox {

// Namespaces every sandbox gets. All of them, always: there is no option to
// share one with the host.
constexpr unsigned long kSandboxNamespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
                                             CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                                             CLONE_NEWCGROUP;

// Holds what is the same for every run (the compiled seccomp program, the
// prepared capability sets, the host ids) so a launch only does per-run work.
// Not thread-safe: the process that launches must be single-threaded (see
// child.h). Constructed by root, it drops the process's supplementary groups,
// which would otherwise follow every sandbox into its user namespace.
class Launcher {
 public:
  Launcher();

  // Runs one sandbox to completion. cancel_fd, if >= 0, is polled: when it
  // becomes readable (e.g. a signalfd for SIGINT/SIGTERM) the sandbox is torn
  // down and the Result says killed. Setup failures come back as status
  // setup_error with the step, object and errno; only an invalid spec throws
  // (UsageError).
  Result run(const RunSpec& spec, int cancel_fd = -1) const;

  const HostIds& host_ids() const { return host_ids_; }
  const SeccompProgram& seccomp() const { return seccomp_; }

 private:
  SeccompProgram seccomp_;
  CapabilityDrop caps_;
  HostIds host_ids_;
};

}  // namespace nsbox
