// The seccomp filter: built once with libseccomp in the supervisor, exported as
// a BPF program, and loaded by the child with one raw seccomp(2) call.
#pragma once

#include <linux/filter.h>

#include <algorithm>
#include <cerrno>

#include <set>
#include <string>
#include <vector>

namespace nsbox {

struct SeccompChoice;

// One rule of a policy, listed for docs and `nsbox doctor`.
struct SeccompRuleInfo {
  std::string syscall;
  std::string condition;  // empty: every call
  std::string action;     // "EPERM", "ENOSYS"
  std::string reason;
};

class SeccompProgram {
 public:
  // The default policy: a deny list of the calls that reach kernel attack
  // surface or the host (each rule's reason is in seccomp.cc).
  static SeccompProgram default_policy();
  // The fork server's own filter: the default policy but for clone into a
  // new user and pid namespace, unshare, mount and sethostname, which it and
  // each run's PID 1 need to give the run fresh namespaces before that run's
  // own filter is loaded on top. Denied calls answer in the kernel (no
  // listener: the run's filter needs the one a filter chain may have).
  static SeccompProgram fork_server_policy();
  // An allow list: only the named syscalls run, every other answers EPERM.
  // nsbox's own rules still apply on top (a listed clone may not create
  // namespaces, a listed ioctl may not be TIOCSTI, ptrace/mount/bpf/... stay
  // denied, clone3 and io_uring answer ENOSYS so runtimes fall back).
  // Unknown names throw SysError naming them.
  static SeccompProgram allow_list(const std::vector<std::string>& syscalls);
  // The built-in `strict` policy: the allow list python3 (threads, asyncio,
  // subprocess, numpy) and node need, from strict_syscalls().
  static SeccompProgram strict_policy();
  // The program a run spec's choice names (run_spec.h), compiled.
  static SeccompProgram for_choice(const SeccompChoice& choice);
  static const std::vector<std::string>& strict_syscalls();

  SeccompProgram(const SeccompProgram&) = delete;
  SeccompProgram& operator=(const SeccompProgram&) = delete;
  SeccompProgram(SeccompProgram&& other) noexcept;
  SeccompProgram& operator=(SeccompProgram&&) = delete;

  // Valid while this object lives; handed to the child before clone.
  const sock_fprog* program() const { return &prog_; }
  size_t instruction_count() const { return filter_.size(); }
  const std::vector<SeccompRuleInfo>& rules() const { return rules_; }
  // Whether denied calls go to the supervisor (user notification). False for
  // an allow list without sendmsg: the workload could not hand the listener
  // over, and would wait forever on its own first denied call.
  bool notifies() const { return notifies_; }

 private:
  SeccompProgram() = default;
  static SeccompProgram deny_list(const std::set<std::string>& allowed, bool notifies);
  void finish(void* filter_ctx);  // exports the compiled filter into filter_
  std::vector<sock_filter> filter_;
  sock_fprog prog_{};
  std::vector<SeccompRuleInfo> rules_;
  bool notifies_ = true;
};

// Whether an allow list's filter notifies the supervisor of denied calls:
// the workload offers its listener with sendmsg, so without it there is no
// listener, and a call of another architecture kills the process in the
// kernel (SIGSYS) instead of being answered.
inline bool allow_list_notifies(const std::vector<std::string>& syscalls) {
  return std::find(syscalls.begin(), syscalls.end(), "sendmsg") != syscalls.end();
}

// Loads prog into the calling thread. Async-signal-safe; returns 0 or errno.
// The EPERM rules of every policy are SECCOMP_RET_USER_NOTIF: the supervisor
// answers them (EPERM) and records which call was denied. *listener receives
// the notification fd (close-on-exec), or -1 when it could not be created; a
// notified call without a listener fails with ENOSYS. listener may be null:
// the filter is then loaded without one.
int load_seccomp_program(const sock_fprog* prog, int* listener) noexcept;

// The errno every notified (denied) call answers.
constexpr int kDeniedErrno = EPERM;

// "" when no seccomp filter is in force on this process; otherwise what it
// means for the sandboxes, which inherit such a filter (a service manager's
// SystemCallFilter= or RestrictSUIDSGID=, a container runtime's profile):
// it answers before nsbox's own, so the calls it refuses fail with its
// errno and are missing from the runs' denied_syscalls.
std::string inherited_seccomp_warning();

}  // namespace nsbox
