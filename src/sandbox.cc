#include "nsbox/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "nsbox/child.h"
#include "nsbox/child_report.h"
#include "nsbox/egress.h"
#include "nsbox/error.h"
#include "nsbox/fd_passing.h"
#include "nsbox/fork_messages.h"
#include "nsbox/fork_server.h"
#include "nsbox/io.h"
#include "nsbox/mounts.h"
#include "nsbox/proc_stat.h"
#include "nsbox/rlimits.h"
#include "nsbox/unique_fd.h"
#include "nsbox/userns.h"
#include "nsbox/workspace.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// argv/envp as NULL-terminated arrays of C strings owned by this object.
class CStringArray {
 public:
  explicit CStringArray(std::vector<std::string> items) : items_(std::move(items)) {
    for (auto& s : items_) ptrs_.push_back(s.data());
    ptrs_.push_back(nullptr);
  }
  char* const* get() const { return ptrs_.data(); }

 private:
  std::vector<std::string> items_;
  std::vector<char*> ptrs_;
};

// The PID 1 of a sandbox: cloned by this process, or forked by a fork
// server (not this process's child: its parent reaps it). Killed, and reaped
// when it is a child, on destruction unless the supervisor already reaped
// it, so no error path leaves a sandbox behind.
class SandboxProcess {
 public:
  SandboxProcess(pid_t pid, UniqueFd pidfd, bool child = true) : pid_(pid), pidfd_(std::move(pidfd)), child_(child) {}
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;
  SandboxProcess(SandboxProcess&& other) noexcept
      : pid_(other.pid_),
        pidfd_(std::move(other.pidfd_)),
        child_(other.child_),
        reaped_(std::exchange(other.reaped_, true)) {}
  ~SandboxProcess() {
    if (reaped_) return;
    kill();
    if (!child_) {
      wait_for_exit();
      return;
    }
    int status;
    while (::waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
    }
  }

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  // SIGKILL to PID 1 ends every process of the pid namespace.
  void kill() const { ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0); }
  // Reaps PID 1; returns its wait status and fills its rusage (which includes
  // every descendant it reaped).
  // A forked PID 1 has no status or rusage here: it reports the workload's
  // end itself (a PID 1 that ended without a report was killed), and the
  // cgroup counts the run's CPU time.
  int reap(rusage* usage) {
    int status = 0;
    if (!child_) {
      reaped_ = true;
      return SIGKILL;  // the wait status of a SIGKILL
    }
    while (::wait4(pid_, &status, __WALL, usage) < 0) {
      if (errno != EINTR) throw SysError("wait4", "sandbox init", errno);
    }
    reaped_ = true;
    return status;
  }

 private:
  // A forked PID 1 is reaped by its parent, but its pidfd turns readable
  // once it has exited, and a PID 1 exits only after every other process
  // of its pid namespace is gone. Waiting for that leaves the run's cgroup
  // empty, so removing it needs no freeze (a kernel text patch on every
  // CPU, twice). Bounded: a process stuck in the kernel is then frozen and
  // killed with the cgroup as before.
  void wait_for_exit() const {
    pollfd p{pidfd_.get(), POLLIN, 0};
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (ready > 0 || (ready < 0 && errno != EINTR)) return;
    }
  }

  pid_t pid_;
  UniqueFd pidfd_;
  bool child_ = true;
  bool reaped_ = false;
};

// Clones PID 1 of the sandbox, straight into cgroup_fd when given: it never
// runs a single instruction outside its limits.
SandboxProcess clone_sandbox(const ChildConfig& config, int cgroup_fd) {
  int pidfd = -1;
  clone_args args{};
  args.flags = kSandboxNamespaces | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) throw SysError("clone3", "sandbox namespaces", errno);
  if (pid == 0) run_sandbox_child(config);
  return SandboxProcess(static_cast<pid_t>(pid), UniqueFd(pidfd));
}

std::string resolve_rootfs(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) throw SysError("open rootfs", path, errno);
  struct stat st {};
  if (::stat(resolved, &st) != 0) throw SysError("open rootfs", path, errno);
  if (!S_ISDIR(st.st_mode)) throw SysError("open rootfs", path, ENOTDIR);
  return resolved;
}

std::string find_env(const RunSpec& spec, const std::string& key, const std::string& fallback) {
  for (const auto& [k, v] : spec.env)
    if (k == key) return v;
  return fallback;
}

std::vector<std::string> env_strings(const RunSpec& spec) {
  std::vector<std::string> out;
  out.reserve(spec.env.size());
  for (const auto& [k, v] : spec.env) out.push_back(k + "=" + v);
  return out;
}

int exit_code_for_failure(const ChildFailure& failure) {
  if (std::string(failure.step) != "execve") return kSetupFailedExit;
  return failure.err == ENOENT ? 127 : 126;
}

int64_t to_ms(const timeval& tv) { return tv.tv_sec * 1000 + tv.tv_usec / 1000; }

// What the supervision loop learned about the run.
struct Observation {
  std::optional<ChildFailure> failure;
  std::optional<InitReport> report;
  bool timed_out = false;
  bool cpu_time_exceeded = false;
  bool cpu_time_unreadable = false;  // the cgroup's CPU counter failed mid-run: stopped, fail closed
  bool cancelled = false;
  bool oom_killed = false;         // a process of the run was OOM-killed: the run ended (v1; v2 does it itself)
  bool ended_with_report = false;  // the workload ended with PID 1 alone: supervise() did not wait for PID 1
  int init_status = 0;
  rusage usage{};
  std::map<std::string, uint64_t> denied;  // syscalls the filter refused, by name
  std::string foreign_abi_call;            // "x32 getpid": the run was killed for it
};

// What the supervision loop watches.
struct Watch {
  SandboxProcess& proc;
  UniqueFd error_fd;
  UniqueFd report_fd;
  OutputCapture* out = nullptr;
  OutputCapture* err = nullptr;
  OutputCapture* fd3 = nullptr;
  UniqueFd stdin_fd;  // non-blocking; fed from stdin_data, then closed
  const std::string* stdin_data = nullptr;
  int cancel_fd = -1;
  std::optional<Clock::time_point> deadline;
  RunCgroup* cgroup = nullptr;
  std::chrono::milliseconds cpu_time{0};  // enforced from the cgroup's usage
  int64_t cpu_baseline_ms = 0;            // usage before the run began (a warm sandbox's start-up)
  UniqueFd notify_sock;                   // the workload sends its seccomp listener here
  UniqueFd listener;                      // then: denied calls to answer and record
  UniqueFd proxy_sock;                    // PID 1 sends the egress proxy's listening socket here
  EgressProxy* proxy = nullptr;
  // The run may end at PID 1's report when PID 1 was left alone, without
  // waiting for PID 1 and the namespaces to go: the cgroup, not PID 1's
  // rusage, then gives the CPU time.
  bool may_end_with_report = false;
};

// Distinct names recorded per run: a workload cycling through syscall
// numbers must not grow the supervisor's memory.
constexpr size_t kMaxDeniedNames = 64;

// A call of another ABI (i386, x32): its name, e.g. "x32 getpid", or "" for
// a native call.
std::string foreign_abi_name(const seccomp_notif& req) {
  constexpr uint32_t kX32Bit = 0x40000000;
  uint32_t arch = req.data.arch;
  if (arch == SCMP_ARCH_X86_64 && !(static_cast<uint32_t>(req.data.nr) & kX32Bit)) return "";
  const char* abi = arch == SCMP_ARCH_X86_64 ? "x32" : arch == SCMP_ARCH_X86 ? "i386" : "foreign";
  if (arch == SCMP_ARCH_X86_64) arch = SCMP_ARCH_X32;
  char* name = seccomp_syscall_resolve_num_arch(arch, static_cast<int>(req.data.nr));
  std::string out = std::string(abi) + " " + (name ? name : "syscall " + std::to_string(req.data.nr));
  std::free(name);
  return out;
}

// One call the filter sent here, taken as it comes and counted by name for
// the Result; its id is returned, to be answered (at AnswerPace's pace).
// A call of another ABI is never answered: the whole run is killed at once,
// as the kernel would kill the process without a listener, and the Result
// names the call.
std::optional<uint64_t> receive_denied_call(Watch& w, Observation& obs) {
  seccomp_notif req{};
  if (::ioctl(w.listener.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
    if (errno != EINTR && errno != ENOENT) w.listener.reset();
    return std::nullopt;
  }
  if (std::string foreign = foreign_abi_name(req); !foreign.empty()) {
    w.proc.kill();
    if (obs.foreign_abi_call.empty()) obs.foreign_abi_call = foreign;
    ++obs.denied[foreign];
    return std::nullopt;
  }
  char* name = seccomp_syscall_resolve_num_arch(req.data.arch, static_cast<int>(req.data.nr));
  std::string key = name ? name : "syscall " + std::to_string(req.data.nr);
  std::free(name);
  if (obs.denied.size() < kMaxDeniedNames || obs.denied.count(key)) ++obs.denied[key];
  return req.id;
}

// The answer: kDeniedErrno, a plain EPERM to the workload.
void answer_denied_call(Watch& w, uint64_t id) {
  seccomp_notif_resp resp{};
  resp.id = id;
  resp.error = -kDeniedErrno;
  ::ioctl(w.listener.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp);  // ENOENT: the caller is gone
}

// How often the run's CPU usage is read when cpu_time is enforced.
constexpr int kCpuTimeTickMs = 20;

// How fast refused calls are answered: a burst of kBurst, then kPerMs a
// millisecond. A run looping on one made nsbox (whose CPU is not the run's)
// spend about as much CPU as the run; an unanswered call waits in the
// kernel, so the loop slows instead. A program making a few hundred (ls -l
// under strict refuses a getxattr per file) never waits. Calls are still
// received as they come: one of another ABI ends the run at once.
class AnswerPace {
 public:
  bool take(Clock::time_point now) {
    tokens_ = std::min(kBurst, tokens_ + kPerMs * std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }
  Clock::time_point next_token(Clock::time_point now) const {
    return now + std::chrono::microseconds(static_cast<int64_t>((1 - tokens_) / kPerMs * 1000) + 1);
  }

 private:
  static constexpr double kBurst = 256;
  static constexpr double kPerMs = 1.6;
  double tokens_ = kBurst;
  Clock::time_point last_ = Clock::now();
};

// Writes the next chunk of stdin_data; closes the pipe when all is written
// or the reader is gone (a workload need not read its input).
void feed_stdin(Watch& w, size_t& offset) {
  while (offset < w.stdin_data->size()) {
    ssize_t n = ::write(w.stdin_fd.get(), w.stdin_data->data() + offset,
                        std::min<size_t>(w.stdin_data->size() - offset, 1 << 16));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) break;  // EPIPE: the workload closed its stdin
    offset += static_cast<size_t>(n);
  }
  w.stdin_fd.reset();
}

// Waits for the sandbox to end while draining its output, enforcing the wall
// deadline and the CPU time, and honouring cancel_fd.
Observation supervise(Watch w) {
  Observation obs;
  bool init_running = true;
  // After PID 1 is gone every writer is dead too; the drain is bounded anyway.
  std::optional<Clock::time_point> drain_deadline;
  const bool enforce_cpu = w.cgroup && w.cpu_time.count() > 0;
  Clock::time_point next_cpu_check = Clock::now() + std::chrono::milliseconds(kCpuTimeTickMs);
  size_t stdin_offset = 0;
  AnswerPace pace;
  std::deque<uint64_t> unanswered;  // at most one call per task of the run
  for (;;) {
    const bool pipes_open =
        w.error_fd || w.report_fd || (w.out && w.out->open()) || (w.err && w.err->open()) || (w.fd3 && w.fd3->open());
    if (!init_running) w.stdin_fd.reset();
    if (!init_running && !pipes_open) break;
    if (drain_deadline && Clock::now() >= *drain_deadline) break;

    int timeout_ms = -1;
    auto shorten = [&](int ms) { timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms); };
    pollfd fds[12];
    int n = 0;
    auto add = [&](int fd) {
      fds[n] = {fd, POLLIN, 0};
      return n++;
    };
    // Output past its cap is read at OutputCapture's pace, not as it comes.
    const Clock::time_point now = Clock::now();
    // A resting fd is still watched for its end (poll reports POLLHUP
    // whatever was asked): once the writers are gone, what is left is read
    // at once, and the run's end waits for no rest.
    auto add_capture = [&](OutputCapture* c) {
      if (!c || !c->open()) return -1;
      const int i = add(c->fd());
      if (c->resting(now)) {
        fds[i].events = 0;
        shorten(ms_until(c->rest_until()));
      }
      return i;
    };
    int i_proc = init_running ? add(w.proc.pidfd()) : -1;
    int i_err = w.error_fd ? add(w.error_fd.get()) : -1;
    int i_rep = w.report_fd ? add(w.report_fd.get()) : -1;
    int i_out = add_capture(w.out);
    int i_errout = add_capture(w.err);
    int i_cancel = init_running && !obs.cancelled && w.cancel_fd >= 0 ? add(w.cancel_fd) : -1;
    int i_fd3 = add_capture(w.fd3);
    int i_in = w.stdin_fd ? add(w.stdin_fd.get()) : -1;
    if (i_in >= 0) fds[i_in].events = POLLOUT;
    int i_nsock = w.notify_sock ? add(w.notify_sock.get()) : -1;
    int i_listen = w.listener ? add(w.listener.get()) : -1;
    if (w.listener && !unanswered.empty()) shorten(ms_until(pace.next_token(now)));
    int i_psock = w.proxy_sock ? add(w.proxy_sock.get()) : -1;

    const bool killing =
        obs.timed_out || obs.cpu_time_exceeded || obs.cpu_time_unreadable || obs.cancelled || obs.oom_killed;
    const int oom_events = w.cgroup ? w.cgroup->oom_events_fd() : -1;
    int i_oom = init_running && !killing && oom_events >= 0 ? add(oom_events) : -1;
    if (init_running && w.deadline && !killing) shorten(ms_until(*w.deadline));
    if (init_running && enforce_cpu && !killing) shorten(ms_until(next_cpu_check));
    if (drain_deadline) shorten(ms_until(*drain_deadline));
    int ready = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw SysError("poll", "sandbox", errno);
    }
    if (init_running && !killing) {
      if (w.deadline && Clock::now() >= *w.deadline) {
        obs.timed_out = true;
        w.proc.kill();
      } else if (enforce_cpu && Clock::now() >= next_cpu_check) {
        // At most once a tick, not on every pipe event: the read costs more
        // than the events of a chatty workload.
        next_cpu_check = Clock::now() + std::chrono::milliseconds(kCpuTimeTickMs);
        const int64_t used = w.cgroup->cpu_ms();
        if (used < 0) {
          obs.cpu_time_unreadable = true;  // a limit that cannot be checked is not left unchecked
          w.proc.kill();
        } else if (used - w.cpu_baseline_ms >= w.cpu_time.count()) {
          obs.cpu_time_exceeded = true;
          w.proc.kill();
        }
      }
    }
    auto readable = [&](int idx) { return idx >= 0 && (fds[idx].revents & (POLLIN | POLLHUP | POLLERR)); };
    if (readable(i_err)) {
      ChildFailure failure{};
      if (read_full(w.error_fd.get(), &failure, sizeof(failure)) == sizeof(failure)) {
        if (!obs.failure) obs.failure = failure;
      } else {
        w.error_fd.reset();
      }
    }
    if (readable(i_rep)) {
      InitReport report{};
      if (read_full(w.report_fd.get(), &report, sizeof(report)) == sizeof(report)) {
        obs.report = report;
      } else {
        w.report_fd.reset();
      }
    }
    if (i_in >= 0 && (fds[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) feed_stdin(w, stdin_offset);
    if (readable(i_nsock)) {
      char tag = 0;
      int fd = take_offered_fd(w.notify_sock.get(), &tag);
      w.listener.reset(fd >= 0 ? fd : -1);
      w.notify_sock.reset();
    }
    if (readable(i_psock)) {
      char tag = 0;
      int fd = take_offered_fd(w.proxy_sock.get(), &tag);
      if (fd >= 0) w.proxy->start(UniqueFd(fd));
      w.proxy_sock.reset();
    }
    if (i_listen >= 0 && (fds[i_listen].revents & POLLIN)) {
      if (const auto id = receive_denied_call(w, obs)) unanswered.push_back(*id);
    } else if (i_listen >= 0 && (fds[i_listen].revents & (POLLHUP | POLLERR))) {
      w.listener.reset();  // no process of the run holds the filter any more
    }
    while (w.listener && !unanswered.empty() && pace.take(Clock::now())) {
      answer_denied_call(w, unanswered.front());
      unanswered.pop_front();
    }
    if (readable(i_fd3)) w.fd3->on_readable();
    if (readable(i_out)) w.out->on_readable();
    if (readable(i_errout)) w.err->on_readable();
    if (readable(i_cancel) && !obs.cancelled) {
      obs.cancelled = true;
      w.proc.kill();
    }
    if (readable(i_oom) && !obs.oom_killed && w.cgroup->took_own_oom_event()) {
      obs.oom_killed = true;
      w.proc.kill();
    }
    if (readable(i_proc)) {
      obs.init_status = w.proc.reap(&obs.usage);
      init_running = false;
      drain_deadline = Clock::now() + std::chrono::seconds(1);
    }
    // The workload has ended, its output is all read and no other process
    // of the run exists (PID 1 checked): nothing of it can write, fork or
    // connect any more. Tearing down PID 1 and the namespaces (a few ms)
    // happens after the answer. The error pipe must be at end of file too
    // (it is from the workload's execve on): a setup failure written just
    // before the report is never left unread.
    const bool stopping = obs.timed_out || obs.cpu_time_exceeded || obs.cpu_time_unreadable || obs.cancelled ||
                          obs.oom_killed || !obs.foreign_abi_call.empty();
    if (init_running && w.may_end_with_report && !stopping && obs.report && obs.report->alone == 1 && !w.error_fd &&
        !(w.out && w.out->open()) && !(w.err && w.err->open()) && !(w.fd3 && w.fd3->open())) {
      obs.ended_with_report = true;
      break;
    }
  }
  return obs;
}

void fill_outcome(const Observation& obs, Result& r) {
  if (obs.failure) {
    r.status = RunStatus::kSetupError;
    r.error = format_sys_error(obs.failure->step, obs.failure->object, obs.failure->err);
    r.exit_code = exit_code_for_failure(*obs.failure);
    return;
  }
  if (!obs.foreign_abi_call.empty() && !obs.timed_out && !obs.cancelled) {
    // What the kernel's SECCOMP_RET_KILL_PROCESS would have reported.
    r.status = RunStatus::kKilled;
    r.signal = SIGSYS;
    r.exit_code = 128 + SIGSYS;
    r.error = "killed by the seccomp filter: " + obs.foreign_abi_call +
              " is a system call of another ABI, which a filter for x86_64 cannot check";
    return;
  }
  if (obs.timed_out || obs.cpu_time_exceeded || obs.cpu_time_unreadable || obs.cancelled) {
    r.status = obs.cancelled || obs.cpu_time_unreadable ? RunStatus::kKilled : RunStatus::kTimeout;
    r.signal = SIGKILL;
    r.exit_code = 128 + SIGKILL;
    if (obs.cpu_time_unreadable)
      r.error =
          "stopped: the run's CPU time could no longer be read from its cgroup, so cpu_time could not be enforced";
    return;
  }
  if (obs.report && obs.report->kind == InitReport::kExited) {
    r.exit_code = obs.report->value;
    r.status = r.exit_code == 0 ? RunStatus::kOk : RunStatus::kExitNonzero;
    return;
  }
  int sig = obs.report ? obs.report->value : (WIFSIGNALED(obs.init_status) ? WTERMSIG(obs.init_status) : SIGKILL);
  if (!obs.report && WIFEXITED(obs.init_status)) {
    // PID 1 died without a report: it can only have failed before the workload ran.
    r.status = RunStatus::kSetupError;
    r.error = "sandbox init exited with status " + std::to_string(WEXITSTATUS(obs.init_status)) +
              " before starting the command";
    r.exit_code = kSetupFailedExit;
    return;
  }
  r.status = RunStatus::kKilled;
  r.signal = sig;
  r.exit_code = 128 + sig;
}

// The cgroup's figures are the run's: every process, even those PID 1 never
// reaped. An OOM kill turns a killed run into status oom; one for memory
// that ran out above the run says so, since its own limit was not hit.
void apply_cgroup_usage(const CgroupUsage& usage, Result& r) {
  if (usage.cpu_ms >= 0) r.cpu_ms = usage.cpu_ms;
  r.peak_memory_bytes = usage.peak_memory_bytes;
  if (usage.oom_kills > 0) {
    if (!usage.oom_from_above) r.limits_hit.push_back("memory");
    if (r.status == RunStatus::kKilled || r.status == RunStatus::kExitNonzero) {
      r.status = RunStatus::kOom;
      if (usage.oom_from_above) r.error = kOomFromAbove;
    }
  }
  if (usage.pids_limit_hits > 0) r.limits_hit.push_back("pids");
  if (usage.cpu_throttled > 0) r.limits_hit.push_back("cpu");
}

void note_limits_hit(const Observation& obs, Result& r) {
  if (obs.cpu_time_exceeded) r.limits_hit.push_back("cpu_time");
  if (obs.timed_out) r.limits_hit.push_back("wall_time");
  if (r.stdout_truncated || r.stderr_truncated) r.limits_hit.push_back("output");
  if (r.network) {
    for (auto& hit : egress_limits_hit(r.network->connection_cap_hit, r.network->byte_cap_hit))
      r.limits_hit.push_back(std::move(hit));
  }
}

// [arg_start, arg_end) of this process (fields 48 and 49 of /proc/self/stat);
// {0, 0} when unknown.
std::pair<uintptr_t, uintptr_t> own_cmdline_area() {
  const uintptr_t start = std::strtoull(proc_stat_field(0, 48).c_str(), nullptr, 10);
  const uintptr_t end = std::strtoull(proc_stat_field(0, 49).c_str(), nullptr, 10);
  if (start == 0 || end <= start) return {0, 0};
  return {start, end};
}

}  // namespace

Launcher::Launcher(const LauncherOptions& options)
    : seccomp_(SeccompProgram::default_policy()),
      host_ids_(choose_host_ids()),
      cgroups_(options.cgroup_host ? *options.cgroup_host : CgroupHost::detect(options.cgroup_parent)),
      cmdline_(own_cmdline_area()) {
  // Supplementary groups survive into a user namespace (setgroups is denied
  // there), so a root supervisor drops its own before cloning any sandbox.
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) throw SysError("setgroups", "[]", errno);
  // Said once here rather than as every run's "open rootfs" failure.
  if (const std::string problem = openat2_problem(); !problem.empty()) throw HostError(problem);
  // A workload that closes its stdin early must not kill the supervisor
  // feeding it; the workload's own SIGPIPE disposition is reset to default.
  ::signal(SIGPIPE, SIG_IGN);
  // Once per process, not per run: a failed attempt (no CAP_SYS_RESOURCE)
  // would fail the same way each time.
  allow_runs_their_core_limit();
  stale_removed_ = remove_stale_run_cgroups(cgroups_).removed + remove_stale_workspaces(host_ids_.uid);
}

Launcher::~Launcher() { remove_empty_run_parents(cgroups_); }

namespace {

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string describe_host_cgroups(const CgroupHost& host) {
  std::string v1;
  for (const auto& [c, dir] : host.v1_self_dirs) v1 += (v1.empty() ? "" : ", ") + c;
  return "cgroup v2 " +
         (host.v2_mount ? "at " + host.v2_self_dir + " offers {" + join(host.v2_controllers) + "}"
                        : std::string("is not mounted")) +
         "; cgroup v1 hierarchies: {" + v1 + "}";
}

// When the cgroup v2 root has controllers nsbox's own cgroup was not given,
// the fix is a delegated cgroup, not running without the limits.
std::string withheld_hint(const CgroupHost& host, const std::set<std::string>& missing) {
  std::set<std::string> withheld;
  for (const auto& c : missing)
    if (host.v2_root_controllers.contains(c) && !host.v2_controllers.contains(c)) withheld.insert(c);
  if (withheld.empty()) return "";
  return "; the cgroup v2 root has " + join(withheld) +
         ", but nsbox's cgroup was not given it (a systemd unit or scope without Delegate=yes): start nsbox in a "
         "delegated cgroup (`systemd-run --scope -p Delegate=yes nsbox ...`, a unit with Delegate=yes) or give "
         "it one with --cgroup-parent";
}

// What stands in, and what is lost, when a controller is missing.
std::string best_effort_note(const std::string& controller) {
  if (controller == "memory")
    return "memory limit applied per process as RLIMIT_DATA, not to the run as a whole; no OOM reporting";
  if (controller == "pids") return "pids limit applied as RLIMIT_NPROC of the sandbox user";
  if (controller == "cpu") return "cpus (CPU bandwidth) not limited";
  return controller + " not limited";
}

}  // namespace

const SeccompProgram& Launcher::seccomp_for(const SeccompChoice& choice) const {
  if (choice.kind == SeccompChoice::kDefault) return seccomp_;
  std::string key = choice.kind == SeccompChoice::kForkServer ? "fork-server"
                    : choice.kind == SeccompChoice::kStrict   ? "strict"
                                                              : "allow:";
  if (choice.kind == SeccompChoice::kAllowList)
    for (const auto& name : choice.allow) key += name + ",";
  auto it = extra_seccomp_.find(key);
  if (it == extra_seccomp_.end()) it = extra_seccomp_.emplace(key, SeccompProgram::for_choice(choice)).first;
  return it->second;
}

std::unique_ptr<RunCgroup> Launcher::make_cgroup(const RunSpec& spec, std::vector<std::string>& warnings,
                                                 std::set<std::string>& unenforced, bool& cpu_time_by_cgroup) const {
  const std::set<std::string> needed = controllers_for(spec.limits.cgroup);
  const bool wants_cpu_time = spec.limits.cpu_time.count() > 0;
  const std::string version = cgroups_.choose(needed.empty() ? std::set<std::string>{"memory", "cpu", "pids"} : needed);
  unenforced = needed.empty() ? std::set<std::string>{} : cgroups_.missing(needed);
  if (!unenforced.empty() && !spec.limits.best_effort) {
    throw SysError("cgroup",
                   "the run asks for " + join(unenforced) + " limits but this host has no " + join(unenforced) +
                       " controller (" + describe_host_cgroups(cgroups_) + ")" + withheld_hint(cgroups_, unenforced) +
                       "; set limits.enforcement: best-effort to run without them",
                   ENOTSUP);
  }
  std::unique_ptr<RunCgroup> cgroup;
  if (!version.empty()) {
    try {
      cgroup = create_run_cgroup(cgroups_, version, spec.limits.cgroup, next_run_cgroup_name());
    } catch (const SysError& e) {
      if (!needed.empty() && !spec.limits.best_effort)
        throw SysError(e.step(),
                       e.object() + " (the run's cgroup, for its " + join(needed) +
                           " limits: nsbox needs to run as root or in a cgroup delegated to its user; "
                           "limits.enforcement: best-effort runs without them)",
                       e.err());
      unenforced.insert(needed.begin(), needed.end());
      warnings.push_back(std::string("no cgroup for this run (") + e.what() + ")");
    }
  }
  for (const auto& c : unenforced) warnings.push_back(best_effort_note(c));
  // A cgroup without CPU accounting (a v1 host with no cpuacct hierarchy)
  // cannot enforce cpu_time either: the same choice as having no cgroup.
  cpu_time_by_cgroup = wants_cpu_time && cgroup && cgroup->counts_cpu_time();
  if (wants_cpu_time && !cpu_time_by_cgroup) {
    if (!spec.limits.best_effort) {
      throw SysError("cgroup",
                     cgroup ? "cpu_time needs the run's CPU time, and its cgroup cannot measure it (" +
                                  cgroup->describe() + ": no cpuacct.usage or cpu.stat)"
                            : "cpu_time needs a cgroup to measure the run's CPU time, and none could be created",
                     ENOTSUP);
    }
    warnings.push_back("cpu_time applied per process as RLIMIT_CPU, not to the run as a whole");
  }
  return cgroup;
}

// Everything a started sandbox holds between prepare() and finish(); the
// members are destroyed in reverse order: the sandbox is killed and reaped
// before its cgroup, proxy and workspace go.
struct PreparedRun::State {
  RunSpec spec;
  Clock::time_point prepared_at;
  Result result;  // warnings so far; the whole Result when prepare failed
  bool failed = false;
  std::optional<Workspace> workspace;
  UniqueFd workspace_dir;  // a forked run's workspace (a tmpfs inside the run)
  std::unique_ptr<RunCgroup> cgroup;
  bool cpu_time_by_cgroup = false;  // else RLIMIT_CPU stands in (best-effort)
  bool cpu_weight_lowered = false;  // by prepare's start_cpu_weight; finish() restores it
  std::unique_ptr<EgressProxy> proxy;
  Pipe sync;  // the write end stays open for the whole run
  UniqueFd error_read, report_read, notify_recv, proxy_recv, stdin_write;
  UniqueFd listener;   // a forked run's seccomp listener, received in prepare
  UniqueFd fork_link;  // a forked run's socket to its PID 1: closing it ends the run
  std::optional<OutputCapture> out, err, fd3;
  std::optional<SandboxProcess> proc;
  bool finished = false;
};

PreparedRun::PreparedRun(std::unique_ptr<State> state) : state_(std::move(state)) {}
PreparedRun::~PreparedRun() = default;

int PreparedRun::pidfd() const { return state_->proc ? state_->proc->pidfd() : -1; }
pid_t PreparedRun::pid() const { return state_->proc ? state_->proc->pid() : -1; }
namespace {

// The first child of pid (the workload, for a sandbox's PID 1), or 0.
pid_t first_child(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? static_cast<pid_t>(std::atoi(buf)) : 0;
}

// Whether pid sits in system call nr with fd as its first argument:
// /proc/PID/syscall starts with the number (decimal) and the arguments (hex).
bool blocked_in(pid_t pid, long nr, int fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/syscall", pid);
  int proc_fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (proc_fd < 0) return false;
  char buf[64] = {};
  ssize_t n = ::read(proc_fd, buf, sizeof buf - 1);
  ::close(proc_fd);
  char want[32];
  const int len = std::snprintf(want, sizeof want, "%ld 0x%x ", nr, static_cast<unsigned>(fd));
  return n > 0 && std::strncmp(buf, want, static_cast<size_t>(len)) == 0;
}

// Takes what the sandbox offers while it starts up: the workload's seccomp
// listener and PID 1's egress proxy socket (offer_fd, which waits for the
// answer). finish() takes them otherwise; a sandbox waited for before it is
// finished must be answered here, or it waits for ever.
void take_offers(PreparedRun::State& st) {
  char tag = 0;
  if (st.notify_recv && readable_now(st.notify_recv.get())) {
    const int fd = take_offered_fd(st.notify_recv.get(), &tag);
    st.listener.reset(fd >= 0 ? fd : -1);
    st.notify_recv.reset();
  }
  if (st.proxy_recv && readable_now(st.proxy_recv.get())) {
    UniqueFd socket(take_offered_fd(st.proxy_recv.get(), &tag));
    if (socket && st.proxy) st.proxy->start(std::move(socket));
    st.proxy_recv.reset();
  }
}

// Waits until the workload of the sandbox st blocks in system call nr on
// fd, looking every interval_ms, up to timeout or until abort_fd (if not
// -1) is readable; false when it did not (it ended, is slower, or was
// aborted). Answers its offers meanwhile.
bool wait_for_workload_in(PreparedRun::State& st, long nr, int fd, std::chrono::milliseconds timeout, int abort_fd,
                          int interval_ms) {
  const SandboxProcess& proc = *st.proc;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p[4] = {{proc.pidfd(), POLLIN, 0},
                   {abort_fd, POLLIN, 0},
                   {st.notify_recv ? st.notify_recv.get() : -1, POLLIN, 0},
                   {st.proxy_recv ? st.proxy_recv.get() : -1, POLLIN, 0}};
    const int ready = ::poll(p, 4, interval_ms);
    if (ready < 0 || p[0].revents || p[1].revents) return false;  // PID 1 ended, aborted (or poll failed)
    if (p[2].revents || p[3].revents) {
      take_offers(st);
      continue;
    }
    if (pid_t workload = first_child(proc.pid()); workload > 0 && blocked_in(workload, nr, fd)) return true;
  }
  return false;
}

}  // namespace

bool PreparedRun::wait_for_input(std::chrono::milliseconds timeout, std::chrono::milliseconds check_every,
                                 int abort_fd) const {
  return state_->proc && wait_for_workload_in(*state_, SYS_read, STDIN_FILENO, timeout, abort_fd,
                                              static_cast<int>(check_every.count()));
}

void PreparedRun::journal_egress(EgressJournal journal) {
  if (state_->proxy) state_->proxy->set_journal(std::move(journal));
}

bool PreparedRun::restore_cpu_weight() {
  if (!state_->cpu_weight_lowered) return true;
  try {
    state_->cgroup->set_cpu_weight(kDefaultCpuWeight);
  } catch (const SysError&) {
    return false;
  }
  state_->cpu_weight_lowered = false;
  return true;
}

bool PreparedRun::wait_for_fork_requests(std::chrono::milliseconds timeout, int abort_fd) const {
  // Less often: a zygote starts for a while, and each check takes CPU from it.
  return state_->proc && wait_for_workload_in(*state_, SYS_recvmsg, kForkServerRequestFd, timeout, abort_fd, 10);
}

int64_t PreparedRun::memory_bytes() const { return state_->cgroup ? state_->cgroup->usage().peak_memory_bytes : -1; }

std::vector<int> PreparedRun::output_fds() const {
  std::vector<int> fds;
  for (const auto* capture : {&state_->out, &state_->err})
    if (*capture && (*capture)->open()) fds.push_back((*capture)->fd());
  return fds;
}

void PreparedRun::drain_output(const std::function<void(std::string_view)>& line) {
  constexpr size_t kLongestLine = 4096;
  for (auto* capture : {&state_->out, &state_->err}) {
    if (!*capture || !(*capture)->open()) continue;
    if (readable_now((*capture)->fd())) (*capture)->on_readable();
  }
  if (state_->out) state_->out->data().clear();
  if (!state_->err) return;
  std::string& text = state_->err->data();
  size_t start = 0;
  for (;;) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos && text.size() - start < kLongestLine) break;
    const size_t stop = std::min(end, start + kLongestLine);
    line(std::string_view(text).substr(start, stop - start));
    start = stop == end ? end + 1 : stop;
  }
  text.erase(0, start);
}

namespace {

// Sets the weight a sandbox starts up with; a hint only: a host or profile
// without the cpu controller starts it at the default weight.
bool lower_start_weight(RunCgroup* cgroup, std::optional<uint32_t> weight) {
  if (!cgroup || !weight) return false;
  try {
    return cgroup->set_cpu_weight(*weight);
  } catch (const SysError&) {
    return false;
  }
}

}  // namespace

namespace {

// A sandbox that could not be built: its Result says why (keeping the
// warnings so far), and finish() returns it.
void fail_preparation(PreparedRun::State& st, const SysError& e) {
  std::vector<std::string> warnings = std::move(st.result.warnings);
  st.proc.reset();  // kill (and reap) it before anything it uses goes
  st.result = Result{};
  st.result.warnings = std::move(warnings);
  st.result.status = RunStatus::kSetupError;
  st.result.error = e.what();
  st.result.exit_code = kSetupFailedExit;
  st.failed = true;
}

}  // namespace

std::unique_ptr<PreparedRun> Launcher::prepare(const RunSpec& input, std::optional<uint32_t> start_cpu_weight) const {
  auto st = std::make_unique<PreparedRun::State>();
  st->prepared_at = Clock::now();
  Result& result = st->result;
  try {
    validate(input);
    st->spec = input;
    RunSpec& spec = st->spec;
    spec.rootfs = resolve_rootfs(input.rootfs);
    if (spec.workspace) {
      st->workspace.emplace(*spec.workspace, host_ids_.uid, host_ids_.gid);
      spec.binds.insert(spec.binds.begin(),
                        {st->workspace->host_path(), spec.workspace->inside_path, false, false, true});
      // The cap is a limit like the cgroup's: strict refuses a run without it.
      if (!st->workspace->size_capped() && !spec.limits.best_effort)
        throw SysError("workspace",
                       "the run's workspace cannot be capped in size and files (a tmpfs workspace needs root); set "
                       "limits.enforcement: best-effort (or --best-effort) to run with an uncapped one",
                       ENOTSUP);
      if (!st->workspace->size_capped())
        result.warnings.push_back("workspace size not capped (a tmpfs workspace needs root)");
    }
    MountPlan plan = MountPlan::for_spec(spec);
    CStringArray argv(spec.argv);
    CStringArray envp(env_strings(spec));
    const std::string search_path = find_env(spec, "PATH", "/usr/local/bin:/usr/bin:/bin");
    std::set<std::string> unenforced;
    st->cgroup = make_cgroup(spec, result.warnings, unenforced, st->cpu_time_by_cgroup);
    RunCgroup* cgroup = st->cgroup.get();
    st->cpu_weight_lowered = lower_start_weight(cgroup, start_cpu_weight);
    auto rlimits = rlimits_for(spec.limits);
    for (const auto& extra :
         standin_rlimits(spec.limits, unenforced, spec.limits.cpu_time.count() > 0 && !st->cpu_time_by_cgroup))
      rlimits.push_back(extra);
    const std::vector<RlimitSetting> init_rlimits = spec.makes_runs ? std::vector<RlimitSetting>{} : charged_rlimits();
    rlimits.insert(rlimits.end(), init_rlimits.begin(), init_rlimits.end());
    require_within_own_hard_limits(rlimits);
    const std::vector<UserNsQuota> quotas =
        spec.makes_runs ? std::vector<UserNsQuota>{}
                        : user_ns_quotas(spec.limits.inotify_instances, spec.limits.inotify_watches);

    st->sync = Pipe::create();
    Pipe& sync = st->sync;
    Pipe errors = Pipe::create();
    Pipe reports = Pipe::create();
    std::optional<Pipe> out_pipe;
    std::optional<Pipe> err_pipe;
    std::optional<Pipe> in_pipe;
    std::optional<Pipe> fd3_pipe;
    UniqueFd stdin_source;  // what the workload's stdin reads: /dev/null or in_pipe
    if (spec.stdio == StdioMode::kCapture) {
      out_pipe = Pipe::create();
      err_pipe = Pipe::create();
      if (spec.stdin_data) {
        in_pipe = Pipe::create();
        stdin_source = std::move(in_pipe->read);
      } else {
        stdin_source.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!stdin_source) throw SysError("open", "/dev/null", errno);
      }
      if (spec.capture_fd3) fd3_pipe = Pipe::create();
    }
    int notify_pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, notify_pair) != 0)
      throw SysError("socketpair", "seccomp notification", errno);
    UniqueFd notify_send(notify_pair[1]);
    st->notify_recv.reset(notify_pair[0]);
    // The listener is offered by the workload's pid, which its credentials give.
    const int on = 1;
    if (::setsockopt(st->notify_recv.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
      throw SysError("setsockopt", "SO_PASSCRED", errno);
    std::vector<int> keep = {sync.read.get(), errors.write.get(), reports.write.get(), notify_send.get()};
    UniqueFd proxy_send;
    if (spec.egress) {
      int proxy_pair[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, proxy_pair) != 0)
        throw SysError("socketpair", "egress proxy", errno);
      st->proxy_recv.reset(proxy_pair[0]);
      proxy_send.reset(proxy_pair[1]);
      if (::setsockopt(st->proxy_recv.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
        throw SysError("setsockopt", "SO_PASSCRED", errno);
      keep.push_back(proxy_send.get());
      st->proxy = std::make_unique<EgressProxy>(*spec.egress);
    }
    if (out_pipe) keep.insert(keep.end(), {out_pipe->write.get(), err_pipe->write.get(), stdin_source.get()});
    if (fd3_pipe) keep.push_back(fd3_pipe->write.get());
    if (!fd3_pipe && spec.fd3_socket >= 0) keep.push_back(spec.fd3_socket);

    const SeccompProgram& program = seccomp_for(spec.seccomp);
    // v1 has no CLONE_INTO_CGROUP: PID 1 joins the run's cgroup itself, first
    // thing, through these (no workload code ever runs outside it).
    std::vector<UniqueFd> join = cgroup ? cgroup->open_join_fds() : std::vector<UniqueFd>{};
    const std::vector<int> join_fds = raw_fds(join);
    keep.insert(keep.end(), join_fds.begin(), join_fds.end());  // PID 1 closes them once joined
    std::sort(keep.begin(), keep.end());
    ChildConfig config{
        .sync_fd = sync.read.get(),
        .error_fd = errors.write.get(),
        .report_fd = reports.write.get(),
        .stdin_fd = out_pipe ? stdin_source.get() : -1,
        .stdout_fd = out_pipe ? out_pipe->write.get() : -1,
        .stderr_fd = err_pipe ? err_pipe->write.get() : -1,
        .result_fd = fd3_pipe ? fd3_pipe->write.get() : spec.fd3_socket,
        .keep_fds = keep.data(),
        .keep_fd_count = keep.size(),
        .join_fds = join_fds.data(),
        .join_fd_count = join_fds.size(),
        .mounts = plan.raw().data(),
        .mount_count = plan.raw().size(),
        .hostname = spec.hostname.c_str(),
        .argv = argv.get(),
        .envp = envp.get(),
        .search_path = search_path.c_str(),
        .cwd = spec.cwd.c_str(),
        .uid = spec.sandbox_uid,
        .gid = spec.sandbox_gid,
        .rlimits = rlimits.data(),
        .rlimit_count = rlimits.size(),
        .init_rlimits = init_rlimits.data(),
        .init_rlimit_count = init_rlimits.size(),
        .quotas = quotas.data(),
        .quota_count = quotas.size(),
        .caps = &caps_,
        .seccomp = program.program(),
        .notify_sock = program.notifies() ? notify_send.get() : -1,
        .proxy_sock = proxy_send ? proxy_send.get() : -1,
        .proxy_port = kEgressProxyPort,
        .cmdline_start = reinterpret_cast<char*>(cmdline_.first),
        .cmdline_size = cmdline_.second - cmdline_.first,
    };

    st->proc.emplace(clone_sandbox(config, cgroup ? cgroup->clone_into_fd() : -1));
    SandboxProcess& proc = *st->proc;
    join.clear();
    sync.read.reset();
    notify_send.reset();
    proxy_send.reset();
    errors.write.reset();
    reports.write.reset();
    stdin_source.reset();
    st->error_read = std::move(errors.read);
    st->report_read = std::move(reports.read);
    if (out_pipe) {
      out_pipe->write.reset();
      err_pipe->write.reset();
      st->out.emplace(std::move(out_pipe->read), spec.limits.stdout_bytes);
      st->err.emplace(std::move(err_pipe->read), spec.limits.stderr_bytes);
    }
    if (fd3_pipe) {
      fd3_pipe->write.reset();
      st->fd3.emplace(std::move(fd3_pipe->read), spec.result_bytes);
    }
    if (in_pipe) {
      if (::fcntl(in_pipe->write.get(), F_SETFL, O_NONBLOCK) != 0) throw SysError("fcntl", "stdin pipe", errno);
      st->stdin_write = std::move(in_pipe->write);
    }

    write_id_maps(proc.pid(), spec.sandbox_uid, spec.sandbox_gid, host_ids_);
    // sync.write stays open until the run ends: the child treats its hang-up
    // as the supervisor's death.
    if (::write(sync.write.get(), "g", 1) != 1) throw SysError("write", "sandbox sync pipe", errno);
  } catch (const SysError& e) {
    fail_preparation(*st, e);
  }
  return std::unique_ptr<PreparedRun>(new PreparedRun(std::move(st)));
}

namespace {

// Whether the process of pidfd is still alive (its pid still names it).
// Not !readable_now: a poll that fails counts as dead here (fail closed).
bool alive(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// Whether process pid leads a session of its own (field 6 of its
// /proc/PID/stat, the session's id, is its pid).
bool leads_own_session(pid_t pid) { return proc_stat_field(pid, 6) == std::to_string(pid); }

}  // namespace

std::unique_ptr<PreparedRun> Launcher::prepare_forked(const RunSpec& input, int fork_server) const {
  auto st = std::make_unique<PreparedRun::State>();
  st->prepared_at = Clock::now();
  Result& result = st->result;
  try {
    validate(input);
    if (std::string why = fork_server_refusal(input); !why.empty()) throw SysError("fork server", why, ENOTSUP);
    st->spec = input;
    RunSpec& spec = st->spec;
    std::set<std::string> unenforced;
    st->cgroup = make_cgroup(spec, result.warnings, unenforced, st->cpu_time_by_cgroup);
    RunCgroup* cgroup = st->cgroup.get();
    // The run's CPU time and its end come from its cgroup: PID 1 is not
    // this process's child.
    if (!cgroup || !cgroup->counts_cpu_time())
      throw SysError("fork server", "a forked run needs a cgroup that measures CPU time, and this host gives none",
                     ENOTSUP);
    const std::vector<RlimitSetting> rlimits = forked_run_rlimits(spec.limits, unenforced);
    require_within_own_hard_limits(rlimits);

    Pipe errors = Pipe::create();
    Pipe reports = Pipe::create();
    Pipe out_pipe = Pipe::create();
    Pipe err_pipe = Pipe::create();
    Pipe in_pipe = Pipe::create();
    Pipe fd3_pipe = Pipe::create();
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
      throw SysError("socketpair", "fork request", errno);
    UniqueFd run_sock(pair[0]), theirs(pair[1]);
    const int on = 1;
    if (::setsockopt(run_sock.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
      throw SysError("setsockopt", "SO_PASSCRED", errno);
    const SeccompProgram& program = seccomp_for(spec.seccomp);
    const int request_fds[kForkRequestFds] = {theirs.get(),         in_pipe.read.get(),   out_pipe.write.get(),
                                              err_pipe.write.get(), fd3_pipe.write.get(), errors.write.get(),
                                              reports.write.get()};
    const std::string request = "F" + fork_request(spec, rlimits, program);
    if (request.size() > kMaxForkRequestBytes)
      throw SysError("fork server",
                     "the run's settings (" + std::to_string(request.size()) +
                         " bytes: the profile's env, tmpfs mounts, masks and seccomp program) exceed the " +
                         std::to_string(kMaxForkRequestBytes >> 20) +
                         " MiB a fork request carries; make them smaller or turn fork_server off",
                     EMSGSIZE);
    send_with_fds(fork_server, request, request_fds, kForkRequestFds, "fork request to the fork server");
    for (UniqueFd* fd :
         {&theirs, &in_pipe.read, &out_pipe.write, &err_pipe.write, &fd3_pipe.write, &errors.write, &reports.write})
      fd->reset();
    st->out.emplace(std::move(out_pipe.read), spec.limits.stdout_bytes);
    st->err.emplace(std::move(err_pipe.read), spec.limits.stderr_bytes);
    st->fd3.emplace(std::move(fd3_pipe.read), spec.result_bytes);
    if (::fcntl(in_pipe.write.get(), F_SETFL, O_NONBLOCK) != 0) throw SysError("fcntl", "stdin pipe", errno);
    st->stdin_write = std::move(in_pipe.write);

    // The run's PID 1, just cloned into its user and pid namespaces, waits
    // until it is in the run's cgroup before it does anything for the run
    // (its other namespaces, mounts, the workload are all made in there).
    // Held from now on, so that any failure below kills it.
    // Its pidfd is opened here from the pid its credentials give, not sent:
    // PID 1 has the sandboxes' host user, whose descriptors in flight
    // another run can push past any limit (docs/SECURITY.md, "Counts the
    // kernel keeps per host user"). It waits for the answer, so the pid is
    // still its own.
    const pid_t init = expect_from_fork(run_sock.get(), 'P', errors.read.get(), "run init");
    UniqueFd init_pidfd(static_cast<int>(::syscall(SYS_pidfd_open, init, 0)));
    if (!init_pidfd) throw SysError("pidfd_open", "the run's PID 1", errno);
    st->proc.emplace(init, std::move(init_pidfd), false);
    // v1: PID 1 joins the cgroup itself through the fds the answer 'j'
    // carries (no RCU grace period); v2: it is moved here, and the answer
    // is 'c'. A PID 1 that knows only 'c' (a rootfs older than this binary)
    // exits rather than go on outside the cgroup.
    std::vector<UniqueFd> join = cgroup->open_join_fds();
    if (join.empty()) {
      // PID 1 waits for the answer, so its pid cannot have been reused
      // unless it was killed: checked right before the move by pid.
      if (!alive(st->proc->pidfd()))
        throw SysError("fork server", "the run's PID 1 died before its cgroup move", ESRCH);
      cgroup->add_process(init);
    }
    const std::vector<int> join_fds = raw_fds(join);
    send_with_fds(run_sock.get(), join.empty() ? "c" : "j", join_fds.data(), join_fds.size(),
                  "cgroup answer to the run's PID 1");
    join.clear();
    // 'U': its view is built, its user namespace's quotas set (forkinit.c).
    if (expect_from_fork(run_sock.get(), 'U', errors.read.get(), "run init") != init)
      throw SysError("fork server", "the run's view was reported by another process than its PID 1", EPROTO);
    // The join ran in code the rootfs ships, not this binary: no workload
    // exists yet, and none is let run unless PID 1 is in the run's cgroup.
    if (!cgroup->holds(init))
      throw SysError("fork server", "the run's PID 1 is not in the run's cgroup (" + cgroup->describe() + ")", EPERM);
    // Nor unless it has left the fork server's session (a rootfs older than
    // this binary leaves it in, where a run can signal every other).
    if (!leads_own_session(init))
      throw SysError("fork server", "the run's PID 1 did not start a session of its own (rebuild the rootfs)", EPERM);
    if (spec.workspace) {
      // Opened while PID 1 is alive (so /proc/PID is it), before any user
      // code has arrived; read after the run.
      UniqueFd proc_dir(::open(("/proc/" + std::to_string(init)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!proc_dir || !alive(st->proc->pidfd()))
        throw SysError("open", "/proc of the forked run's PID 1", proc_dir ? ESRCH : errno);
      const std::string path = "root" + spec.workspace->inside_path;
      st->workspace_dir.reset(::openat(proc_dir.get(), path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!st->workspace_dir)
        throw SysError("open", "the forked run's workspace " + spec.workspace->inside_path, errno);
    }
    // The workload sends its filter's listener just before it runs the runner.
    if (program.notifies()) expect_from_fork(run_sock.get(), 'L', errors.read.get(), "seccomp listener", &st->listener);
    st->error_read = std::move(errors.read);
    st->report_read = std::move(reports.read);
    // Held open for the whole run: PID 1 exits, ending the run, when it
    // hangs up (this process died), as a started PID 1 dies with it.
    st->fork_link = std::move(run_sock);
  } catch (const SysError& e) {
    fail_preparation(*st, e);
  }
  return std::unique_ptr<PreparedRun>(new PreparedRun(std::move(st)));
}

Result PreparedRun::finish(std::optional<std::string> stdin_data, std::chrono::milliseconds wall_time, int cancel_fd,
                           std::optional<std::chrono::steady_clock::time_point> started) {
  State& st = *state_;
  const auto start = started.value_or(Clock::now());
  Result result = std::move(st.result);
  if (st.finished) throw UsageError("a prepared run finishes once");
  st.finished = true;
  if (st.failed) {
    result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return result;
  }
  const RunSpec& spec = st.spec;
  RunCgroup* cgroup = st.cgroup.get();
  // What the sandbox used while it waited (a warm sandbox's interpreter
  // start-up) is not the run's.
  const int64_t cpu_baseline = cgroup && !started ? std::max<int64_t>(cgroup->cpu_ms(), 0) : 0;
  if (cgroup) {
    if (std::string problem = cgroup->watch_oom(); !problem.empty()) result.warnings.push_back(std::move(problem));
  }
  if (st.cpu_weight_lowered) {
    try {
      cgroup->set_cpu_weight(kDefaultCpuWeight);  // the run competes as an equal
    } catch (const SysError& e) {
      result.warnings.push_back(std::string("the run kept its start-up CPU weight (") + e.what() + ")");
    }
  }
  try {
    Watch watch{.proc = *st.proc,
                .error_fd = std::move(st.error_read),
                .report_fd = std::move(st.report_read),
                .out = st.out ? &*st.out : nullptr,
                .err = st.err ? &*st.err : nullptr,
                .fd3 = st.fd3 ? &*st.fd3 : nullptr,
                .stdin_fd = std::move(st.stdin_write),
                .stdin_data = stdin_data ? &*stdin_data : nullptr,
                .cancel_fd = cancel_fd,
                .deadline = std::nullopt,
                .cgroup = cgroup,
                .cpu_time = st.cpu_time_by_cgroup ? spec.limits.cpu_time : std::chrono::milliseconds(0),
                .cpu_baseline_ms = cpu_baseline,
                .notify_sock = std::move(st.notify_recv),
                .listener = std::move(st.listener),
                .proxy_sock = std::move(st.proxy_recv),
                .proxy = st.proxy.get(),
                .may_end_with_report = cgroup && cgroup->counts_cpu_time()};
    if (!watch.stdin_data) watch.stdin_fd.reset();
    if (wall_time.count() > 0) watch.deadline = start + wall_time;
    Observation obs = supervise(std::move(watch));
    // Only PID 1 is left: it is killed now and reaped when the PreparedRun
    // goes, which takes the namespaces with it.
    if (obs.ended_with_report) st.proc->kill();
    if (st.proxy) {
      st.proxy->stop();  // every process of the run is gone: no connection is wanted any more
      result.network = st.proxy->report();
    }
    fill_outcome(obs, result);
    result.denied_syscalls = std::move(obs.denied);
    result.cpu_ms = to_ms(obs.usage.ru_utime) + to_ms(obs.usage.ru_stime);
    if (st.out) {
      result.stdout_data = std::move(st.out->data());
      result.stdout_truncated = st.out->truncated();
      result.stderr_data = std::move(st.err->data());
      result.stderr_truncated = st.err->truncated();
    }
    if (st.fd3) {
      result.fd3_data = std::move(st.fd3->data());
      result.fd3_truncated = st.fd3->truncated();
    }
    if (cgroup) {
      if (!obs.ended_with_report) cgroup->kill_all();
      CgroupUsage usage = cgroup->usage();
      // Told of the OOM (v1), the supervisor ended the run at once: the
      // OOM killer may not have got to count a kill of its own.
      if (obs.oom_killed) {
        usage.oom_kills = std::max<uint64_t>(usage.oom_kills, 1);
        usage.oom_from_above = false;  // its own: the notification came with under_oom set
      }
      if (usage.cpu_ms >= 0) usage.cpu_ms = std::max<int64_t>(usage.cpu_ms - cpu_baseline, 0);
      if (usage.cpu_ms < 0 && obs.ended_with_report)  // PID 1's rusage was not waited for either
        result.warnings.push_back("cpu_ms unknown: the cgroup's CPU counter could not be read at the end of the run");
      apply_cgroup_usage(usage, result);
    }
    note_limits_hit(obs, result);
    if (st.workspace || st.workspace_dir) {
      // Every process of the run is gone: nothing can change out/ any more.
      ArtifactReport report =
          st.workspace ? st.workspace->collect() : collect_artifacts(*spec.workspace, st.workspace_dir.get());
      result.artifacts = std::move(report.artifacts);
      result.artifacts_refused = std::move(report.refused);
    }
  } catch (const SysError& e) {
    std::vector<std::string> warnings = std::move(result.warnings);
    result = Result{};
    result.warnings = std::move(warnings);
    if (st.proxy) {
      // What the proxy did stays the run's record (the audit log's lines).
      st.proxy->stop();
      result.network = st.proxy->report();
      result.limits_hit = egress_limits_hit(result.network->connection_cap_hit, result.network->byte_cap_hit);
    }
    result.status = RunStatus::kSetupError;
    result.error = e.what();
    result.exit_code = kSetupFailedExit;
  }
  result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return result;
}

Result Launcher::run(const RunSpec& spec, int cancel_fd, const EgressJournal& journal) const {
  const auto start = Clock::now();
  std::unique_ptr<PreparedRun> prepared = prepare(spec);
  if (journal) prepared->journal_egress(journal);
  return prepared->finish(spec.stdin_data, spec.limits.wall_time, cancel_fd, start);
}

}  // namespace nsbox
