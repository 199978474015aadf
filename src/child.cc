#include "nsbox/child.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "nsbox/child_report.h"
#include "nsbox/fd_passing.h"
#include "nsbox/netns.h"
#include "nsbox/seccomp.h"

namespace nsbox {

void report_child_failure(int fd, const char* step, const char* object, int err) noexcept {
  ChildFailure failure{};
  std::strncpy(failure.step, step ? step : "", sizeof(failure.step) - 1);
  std::strncpy(failure.object, object ? object : "", sizeof(failure.object) - 1);
  failure.err = err;
  // One write of < PIPE_BUF... not guaranteed for 4 KiB+, but the supervisor
  // reads until it has the whole record.
  const char* p = reinterpret_cast<const char*>(&failure);
  size_t left = sizeof(failure);
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

namespace {

[[noreturn]] void fail(const ChildConfig& c, const char* step, const char* object, int err,
                       int exit_code = kSetupFailedExit) noexcept {
  report_child_failure(c.error_fd, step, object, err);
  ::_exit(exit_code);
}

// Closes every fd >= 3 except the sorted keep list: nothing of the host
// (a directory fd would be a way out of the new root) crosses into the sandbox.
int close_inherited_fds(const int* keep, size_t count) noexcept {
  unsigned int next = 3;
  for (size_t i = 0; i < count; ++i) {
    unsigned int fd = static_cast<unsigned int>(keep[i]);
    if (fd > next && ::syscall(SYS_close_range, next, fd - 1, 0) != 0) return errno;
    if (fd >= next) next = fd + 1;
  }
  if (::syscall(SYS_close_range, next, ~0U, 0) != 0) return errno;
  return 0;
}

void reset_signals() noexcept {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// PID 1 is a copy of the supervisor, argv included: without this the
// workload reads the supervisor's command line (host paths, the node's
// config file, a run's code) in /proc/1/cmdline.
void hide_supervisor_cmdline(const ChildConfig& c) noexcept {
  static const char kName[] = "nsbox-init";
  ::prctl(PR_SET_NAME, kName, 0, 0, 0);
  if (!c.cmdline_start || c.cmdline_size == 0) return;
  std::memset(c.cmdline_start, 0, c.cmdline_size);
  std::memcpy(c.cmdline_start, kName, std::min(sizeof kName, c.cmdline_size) - 1);
}

// execvp without malloc: candidates are built in a stack buffer.
[[noreturn]] void exec_in_path(const ChildConfig& c) noexcept {
  const char* file = c.argv[0];
  if (std::strchr(file, '/') != nullptr) {
    ::execve(file, c.argv, c.envp);
    fail(c, "execve", file, errno, errno == ENOENT ? 127 : 126);
  }
  int last_err = ENOENT;
  char candidate[PATH_MAX];
  const size_t file_len = std::strlen(file);
  for (const char* dir = c.search_path; dir != nullptr && *dir != '\0';) {
    const char* end = std::strchr(dir, ':');
    size_t dir_len = end ? static_cast<size_t>(end - dir) : std::strlen(dir);
    if (dir_len > 0 && dir_len + 1 + file_len < sizeof(candidate)) {
      std::memcpy(candidate, dir, dir_len);
      candidate[dir_len] = '/';
      std::memcpy(candidate + dir_len + 1, file, file_len + 1);
      ::execve(candidate, c.argv, c.envp);
      if (errno != ENOENT && errno != ENOTDIR) last_err = errno;
    }
    dir = end ? end + 1 : nullptr;
  }
  fail(c, "execve", file, last_err, last_err == ENOENT ? 127 : 126);
}

// The workload: stdio, rlimits, cwd, the sandbox user, no capabilities,
// no_new_privs, seccomp last, then execve.
[[noreturn]] void become_workload(const ChildConfig& c) noexcept {
  reset_signals();
  if (c.stdin_fd >= 0) {
    if (::dup2(c.stdin_fd, 0) < 0) fail(c, "dup2", "stdin", errno);
    if (::dup2(c.stdout_fd, 1) < 0) fail(c, "dup2", "stdout", errno);
    if (::dup2(c.stderr_fd, 2) < 0) fail(c, "dup2", "stderr", errno);
  }
  // The result pipe may itself be fd 3 (and close-on-exec): park it above
  // the range that is about to be marked, then place it at 3.
  int result_tmp = -1;
  if (c.result_fd >= 0 && (result_tmp = ::fcntl(c.result_fd, F_DUPFD_CLOEXEC, 64)) < 0)
    fail(c, "dup", "result fd", errno);
  // Everything but stdio closes at execve; error_fd stays open until then.
  if (::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) fail(c, "close_range", "inherited fds", errno);
  if (result_tmp >= 0 && ::dup2(result_tmp, 3) < 0) fail(c, "dup2", "result fd 3", errno);
  const char* name = nullptr;
  if (int err = apply_rlimits(c.rlimits, c.rlimit_count, &name)) fail(c, "setrlimit", name, err);
  if (::chdir(c.cwd) != 0) fail(c, "chdir", c.cwd, errno);
  // Raw calls: glibc's wrappers would run its multi-thread set-id protocol
  // (locks and state in memory this process shares with PID 1).
  if (::syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0) fail(c, "setresgid", "sandbox group", errno);
  if (::syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0) fail(c, "setresuid", "sandbox user", errno);
  const char* step = nullptr;
  if (int err = c.caps->clear_process_sets(&step)) fail(c, step, "workload", err);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(c, "prctl", "PR_SET_NO_NEW_PRIVS", errno);
  int listener = -1;
  if (int err = load_seccomp_program(c.seccomp, c.notify_sock >= 0 ? &listener : nullptr))
    fail(c, "seccomp", "load filter", err);
  if (listener >= 0) {
    // Offered, not sent: see offer_fd (a run's fds in flight must not stop this one).
    if (int err = offer_fd(c.notify_sock, listener, 'L')) fail(c, "sendmsg", "seccomp listener", err);
    ::close(listener);
  }
  if (c.notify_sock >= 0) ::close(c.notify_sock);
  exec_in_path(c);
}

#if defined(__SANITIZE_ADDRESS__)
#define NSBOX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NSBOX_ASAN 1
#endif
#endif
#ifdef NSBOX_ASAN
// AddressSanitizer cannot follow code that runs on a stack it did not see
// being made (it warns on the workload's stderr, and its checks on that
// stack are unreliable): the sanitizer build forks the workload instead.
constexpr bool kWorkloadSharesMemory = false;
#else
constexpr bool kWorkloadSharesMemory = true;
#endif

// The workload's stack while it shares PID 1's memory (below): it runs the
// setup above and the PATH search on it, then execve leaves it behind.
constexpr size_t kWorkloadStackBytes = size_t{1} << 20;
constexpr size_t kGuardPageBytes = 4096;

// The domain name of a UTS namespace nobody named: the kernel's default.
constexpr const char* kNoDomainName = "(none)";

int workload_entry(void* config) { become_workload(*static_cast<const ChildConfig*>(config)); }

// Starts the workload the way posix_spawn starts a program: sharing PID 1's
// memory (CLONE_VM) on a stack of its own, with PID 1 suspended (CLONE_VFORK)
// until the workload's execve or exit. A fork would copy PID 1's address
// space (a copy of the supervisor's) only for execve to drop it: that copy
// was about 2 ms of CPU per run. Sharing is safe because PID 1 is stopped
// and the workload only makes system calls on its own stack; its
// descriptors, signal handlers, credentials, seccomp filter and working
// directory are its own (no CLONE_FILES, CLONE_SIGHAND, CLONE_FS). The stack
// is never unmapped: PID 1 does not live long, and its pages are few.
// What the workload still writes in the shared memory is errno (PID 1's
// thread-local one), which PID 1 reads only after a failed call of its own.
pid_t start_workload(const ChildConfig& c) noexcept {
  if (!kWorkloadSharesMemory) {
    pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0));
    if (pid == 0) become_workload(c);
    return pid;
  }
  void* stack = ::mmap(nullptr, kWorkloadStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  // An overflow faults on the guard page instead of writing into PID 1's memory.
  if (::mprotect(stack, kGuardPageBytes, PROT_NONE) != 0) return -1;
  char* top = static_cast<char*>(stack) + kWorkloadStackBytes;
  return ::clone(workload_entry, top, CLONE_VM | CLONE_VFORK | SIGCHLD, const_cast<ChildConfig*>(&c));
}

// The egress proxy's socket is created here, inside the sandbox's network
// namespace, and served by the supervisor outside it. No process of the
// sandbox keeps it: the workload can neither accept on it nor close it.
void hand_over_proxy_listener(const ChildConfig& c) noexcept {
  int fd = listen_on_loopback(c.proxy_port);
  if (fd < 0) fail(c, "listen", "egress proxy socket 127.0.0.1", -fd);
  if (int err = offer_fd(c.proxy_sock, fd, 'P')) fail(c, "sendmsg", "egress proxy socket", err);
  ::close(fd);
  ::close(c.proxy_sock);
}

// PID 1's own stdio came from the supervisor: the node's log, or the
// caller's terminal or files under `nsbox run`. The workload has its own
// copies where it should; PID 1 needs none, and keeps no host file open
// inside the sandbox for as long as the run lives (a warm sandbox's for
// as long as it waits).
void let_go_of_stdio() noexcept {
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2; ++fd) {
    if (null < 0 || ::dup2(null, fd) < 0) ::close(fd);
  }
  if (null > 2) ::close(null);
}

void send_report(int fd, InitReport report) noexcept {
  while (::write(fd, &report, sizeof(report)) < 0 && errno == EINTR) {
  }
}

// Our PID 1: reaps every orphan, forwards signals to the workload and, when
// the workload ends, reports how and exits, which makes the kernel kill
// whatever is left in the pid namespace (double-forked daemons included).
[[noreturn]] void run_init(pid_t workload, int report_fd) noexcept {
  sigset_t all;
  sigfillset(&all);
  for (;;) {
    siginfo_t info{};
    int sig = ::sigwaitinfo(&all, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      ::kill(workload, sig);
      continue;
    }
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG | __WALL);
      if (pid <= 0) break;
      if (pid != workload) continue;
      // Once PID 1 is alone no process can appear (only PID 1 could start
      // one): the supervisor may answer without waiting for PID 1 to go.
      const int32_t alone = only_process_left() ? 1 : 0;
      if (WIFSIGNALED(status)) {
        send_report(report_fd, {InitReport::kSignaled, WTERMSIG(status), alone});
        ::_exit(128 + WTERMSIG(status));
      }
      send_report(report_fd, {InitReport::kExited, WEXITSTATUS(status), alone});
      ::_exit(WEXITSTATUS(status));
    }
  }
}

}  // namespace

bool only_process_left() noexcept {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG | __WALL);
    if (pid > 0) continue;  // an orphan that had already exited: reaped
    return pid < 0 && errno == ECHILD;
  }
}

void run_sandbox_child(const ChildConfig& c) noexcept {
  // First of all: clone copied every fd of the supervisor, the sync pipe's
  // write end too (and, in a node, those of runs set up at the same time).
  // While such a copy is open, the supervisor's death neither ends the read
  // below nor shows as a hang-up before PR_SET_PDEATHSIG: a half-made
  // sandbox would wait forever, or a run would outlive its supervisor.
  if (int err = close_inherited_fds(c.keep_fds, c.keep_fd_count)) fail(c, "close_range", "inherited fds", err);
  char go = 0;
  ssize_t n;
  while ((n = ::read(c.sync_fd, &go, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) ::_exit(kSetupFailedExit);  // supervisor gone or gave up
  // A session of the sandbox's own, before anything of the run exists:
  // signals and priorities sent to a process group (kill(0, ...),
  // setpriority(PRIO_PGRP, 0, ...)) reach every member, in any pid
  // namespace, and all sandboxes run as one host user; and with no
  // controlling terminal, /dev/tty is not the operator's.
  if (::setsid() < 0) fail(c, "setsid", "sandbox session", errno);
  // Into the run's cgroup (v1) before anything else: the memory of every
  // mount below is the run's (the namespaces clone made were charged
  // before), and no workload can exist outside it.
  for (size_t i = 0; i < c.join_fd_count; ++i) {
    ssize_t written;
    while ((written = ::write(c.join_fds[i], "0", 1)) < 0 && errno == EINTR) {
    }
    if (written != 1) fail(c, "join cgroup", "tasks", written < 0 ? errno : EIO);
    ::close(c.join_fds[i]);
  }
  const char* step = nullptr;
  if (int err = c.caps->drop_bounding_and_lock(&step)) fail(c, step, "sandbox", err);
  // Become the sandbox user first: files created while building /dev need an
  // owner mapped in this user namespace. The capabilities held in it stay
  // (uid 0 is not mapped here, so no setuid fixup applies, and it is locked off).
  if (::syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0) fail(c, "setresgid", "sandbox group", errno);
  if (::syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0) fail(c, "setresuid", "sandbox user", errno);
  // The supervisor's death kills PID 1 and with it the whole pid namespace.
  // Set only now: a credential change clears it. The supervisor holds the
  // sync pipe open for the whole run, so a hang-up means it died before this.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  pollfd sync_poll{c.sync_fd, POLLIN, 0};
  if (::poll(&sync_poll, 1, 0) > 0 && (sync_poll.revents & (POLLHUP | POLLERR))) ::_exit(kSetupFailedExit);
  hide_supervisor_cmdline(c);
  // Through the host's /proc, before the sandbox's own (which masks /proc/sys).
  const char* quota = nullptr;
  if (int err = write_user_ns_quotas(c.quotas, c.quota_count, &quota)) fail(c, "set user namespace quota", quota, err);

  const char* object = nullptr;
  if (int err = apply_mount_plan(c.mounts, c.mount_count, &step, &object)) fail(c, step, object, err);
  if (::sethostname(c.hostname, std::strlen(c.hostname)) != 0) fail(c, "sethostname", c.hostname, errno);
  // A new UTS namespace starts with the host's NIS domain name (a corporate
  // one on many hosts): the kernel's default instead.
  if (::setdomainname(kNoDomainName, std::strlen(kNoDomainName)) != 0) fail(c, "setdomainname", kNoDomainName, errno);
  if (int err = bring_up_loopback()) fail(c, "bring up", "lo", err);
  if (c.proxy_sock >= 0) hand_over_proxy_listener(c);

  ::close(c.sync_fd);
  // A cgroup namespace rooted at the run's cgroup: on cgroup v1 PID 1 was
  // cloned (with the first one) before it joined it, and /proc/self/cgroup
  // would show the host's path of the run's cgroup.
  if (::unshare(CLONE_NEWCGROUP) != 0) fail(c, "unshare", "cgroup namespace", errno);

  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  // Not dumpable from before the workload exists: its execve makes only the
  // workload dumpable again, and PID 1 is never open to it through /proc.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // PID 1 holds no privilege from here on: the workload starts without it
  // too (its setup needs none: the ids are already the sandbox's).
  if (int err = c.caps->clear_process_sets(&step)) fail(c, step, "sandbox init", err);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(c, "prctl", "PR_SET_NO_NEW_PRIVS", errno);
  // The workload can queue signals to PID 1 too.
  const char* rlimit = nullptr;
  if (int err = apply_rlimits(c.init_rlimits, c.init_rlimit_count, &rlimit)) fail(c, "setrlimit", rlimit, err);
  pid_t workload = start_workload(c);
  if (workload < 0) fail(c, "clone", "workload", errno);

  // PID 1 keeps nothing of the workload's plumbing. It runs as the same
  // user as the workload (to forward signals) but is not dumpable, so the
  // workload cannot read or steer it through /proc.
  for (int fd : {c.error_fd, c.stdin_fd, c.stdout_fd, c.stderr_fd, c.result_fd, c.notify_sock}) {
    if (fd >= 0) ::close(fd);
  }
  let_go_of_stdio();
  run_init(workload, c.report_fd);
}

}  // namespace nsbox
