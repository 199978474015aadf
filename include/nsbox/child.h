// The code that runs in the cloned child. After clone the child may make raw
// syscalls only (no malloc, no exceptions, no logging): a raw clone skips
// glibc's fork handlers, so everything it needs is prepared in ChildConfig.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>

#include "nsbox/caps.h"
#include "nsbox/mounts.h"
#include "nsbox/rlimits.h"
#include "nsbox/userns.h"

namespace nsbox {

struct ChildConfig {
  int sync_fd;    // read end: a byte once the id maps are written; EOF aborts
  int error_fd;   // write end, O_CLOEXEC: ChildFailure records
  int report_fd;  // write end: our PID 1's InitReport
  int stdin_fd;   // -1: inherit nsbox's stdio
  int stdout_fd;
  int stderr_fd;
  int result_fd;        // -1, or an fd that becomes the workload's fd 3 (agent results)
  const int* keep_fds;  // sorted, join_fds among them; every other fd >= 3 is closed first thing
  size_t keep_fd_count;
  // cgroup v1: the run's tasks files (RunCgroup::open_join_fds), which
  // PID 1 writes "0" to, and closes, before anything else. On v2 it is
  // cloned into its cgroup instead and there are none.
  const int* join_fds;
  size_t join_fd_count;

  const RawMountOp* mounts;
  size_t mount_count;
  const char* hostname;

  char* const* argv;
  char* const* envp;
  const char* search_path;  // PATH used to find argv[0] inside the sandbox
  const char* cwd;
  uid_t uid;
  gid_t gid;
  const RlimitSetting* rlimits;  // the workload's
  size_t rlimit_count;
  const RlimitSetting* init_rlimits;  // PID 1's own (charged_rlimits())
  size_t init_rlimit_count;
  // Written in the sandbox's user namespace by PID 1 while it still holds
  // capabilities there; none for a fork server (whose runs set their own).
  const UserNsQuota* quotas;
  size_t quota_count;
  const CapabilityDrop* caps;
  const sock_fprog* seccomp;
  // Write end of a SOCK_SEQPACKET pair: the workload sends the seccomp
  // notification fd over it (SCM_RIGHTS) right before execve.
  int notify_sock;
  // -1, or the write end of a SOCK_SEQPACKET pair: PID 1 creates the egress
  // proxy's listening socket in the sandbox's network namespace (on
  // 127.0.0.1:proxy_port) and sends it to the supervisor, which serves it.
  int proxy_sock;
  uint16_t proxy_port;
  // The supervisor's command line in memory: PID 1 is its copy and blanks it,
  // else /proc/1/cmdline shows the workload the supervisor's argv.
  char* cmdline_start;
  size_t cmdline_size;
};

// Exit code of a child that failed during setup (after reporting why).
constexpr int kSetupFailedExit = 125;

// For a pid namespace's PID 1: whether it is the namespace's last process.
// Every other process descends from it (orphans are reparented to it), so
// no child left after reaping the exited ones (which this does) means none
// is left. Children of any exit signal count. Async-signal-safe.
bool only_process_left() noexcept;

// Entry of the cloned child: builds the sandbox, becomes its PID 1 and runs the
// workload as a child of it. Never returns.
[[noreturn]] void run_sandbox_child(const ChildConfig& config) noexcept;

}  // namespace nsbox
