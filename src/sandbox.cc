#include "nsbox/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <optional>

#include "nsbox/child.h"
#include "nsbox/child_report.h"
#include "nsbox/error.h"
#include "nsbox/io.h"
#include "nsbox/mounts.h"
#include "nsbox/rlimits.h"
#include "nsbox/unique_fd.h"

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

// The cloned PID 1 of a sandbox. Killed and reaped on destruction unless the
// supervisor already reaped it, so no error path leaves a sandbox behind.
class SandboxProcess {
 public:
  SandboxProcess(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;
  ~SandboxProcess() {
    if (reaped_) return;
    kill();
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
  int reap(rusage* usage) {
    int status = 0;
    while (::wait4(pid_, &status, __WALL, usage) < 0) {
      if (errno != EINTR) throw SysError("wait4", "sandbox init", errno);
    }
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  bool reaped_ = false;
};

SandboxProcess clone_sandbox(const ChildConfig& config) {
  int pidfd = -1;
  clone_args args{};
  args.flags = kSandboxNamespaces | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
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
  bool cancelled = false;
  int init_status = 0;
  rusage usage{};
};

// Waits for the sandbox to end while draining its output, enforcing the wall
// deadline and honouring cancel_fd.
Observation supervise(SandboxProcess& proc, UniqueFd error_fd, UniqueFd report_fd,
                      OutputCapture* out, OutputCapture* err, int cancel_fd,
                      Clock::time_point deadline, bool has_deadline) {
  Observation obs;
  bool init_running = true;
  // After PID 1 is gone every writer is dead too; the drain is bounded anyway.
  std::optional<Clock::time_point> drain_deadline;
  for (;;) {
    const bool pipes_open = error_fd || report_fd || (out && out->open()) || (err && err->open());
    if (!init_running && !pipes_open) break;
    if (drain_deadline && Clock::now() >= *drain_deadline) break;

    pollfd fds[6];
    int n = 0;
    auto add = [&](int fd) {
      fds[n] = {fd, POLLIN, 0};
      return n++;
    };
    int i_proc = init_running ? add(proc.pidfd()) : -1;
    int i_err = error_fd ? add(error_fd.get()) : -1;
    int i_rep = report_fd ? add(report_fd.get()) : -1;
    int i_out = out && out->open() ? add(out->fd()) : -1;
    int i_errout = err && err->open() ? add(err->fd()) : -1;
    int i_cancel = init_running && cancel_fd >= 0 ? add(cancel_fd) : -1;

    int timeout_ms = -1;
    auto now = Clock::now();
    if (init_running && has_deadline && !obs.timed_out) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    }
    if (drain_deadline) {
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(*drain_deadline - now).count());
      timeout_ms = timeout_ms < 0 ? std::max(left, 0) : std::min(timeout_ms, std::max(left, 0));
    }
    int ready = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw SysError("poll", "sandbox", errno);
    }
    if (init_running && has_deadline && !obs.timed_out && Clock::now() >= deadline) {
      obs.timed_out = true;
      proc.kill();
    }
    auto readable = [&](int idx) { return idx >= 0 && (fds[idx].revents & (POLLIN | POLLHUP | POLLERR)); };
    if (readable(i_err)) {
      ChildFailure failure{};
      if (read_full(error_fd.get(), &failure, sizeof(failure)) == sizeof(failure)) {
        if (!obs.failure) obs.failure = failure;
      } else {
        error_fd.reset();
      }
    }
    if (readable(i_rep)) {
      InitReport report{};
      if (read_full(report_fd.get(), &report, sizeof(report)) == sizeof(report)) {
        obs.report = report;
      } else {
        report_fd.reset();
      }
    }
    if (readable(i_out)) out->on_readable();
    if (readable(i_errout)) err->on_readable();
    if (readable(i_cancel) && !obs.cancelled) {
      obs.cancelled = true;
      proc.kill();
    }
    if (readable(i_proc)) {
      obs.init_status = proc.reap(&obs.usage);
      init_running = false;
      drain_deadline = Clock::now() + std::chrono::seconds(1);
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
  if (obs.timed_out || obs.cancelled) {
    r.status = obs.timed_out ? RunStatus::kTimeout : RunStatus::kKilled;
    r.signal = SIGKILL;
    r.exit_code = 128 + SIGKILL;
    return;
  }
  if (obs.report && obs.report->kind == InitReport::kExited) {
    r.exit_code = obs.report->value;
    r.status = r.exit_code == 0 ? RunStatus::kOk : RunStatus::kExitNonzero;
    return;
  }
  int sig = obs.report ? obs.report->value
                       : (WIFSIGNALED(obs.init_status) ? WTERMSIG(obs.init_status) : SIGKILL);
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

}  // namespace

Launcher::Launcher() : seccomp_(SeccompProgram::default_policy()), host_ids_(choose_host_ids()) {
  // Supplementary groups survive into a user namespace (setgroups is denied
  // there), so a root supervisor drops its own before cloning any sandbox.
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) throw SysError("setgroups", "[]", errno);
}

Result Launcher::run(const RunSpec& input, int cancel_fd) const {
  const auto start = Clock::now();
  Result result;
  try {
    validate(input);
    RunSpec spec = input;
    spec.rootfs = resolve_rootfs(input.rootfs);
    MountPlan plan = MountPlan::for_spec(spec);
    CStringArray argv(spec.argv);
    CStringArray envp(env_strings(spec));
    const std::string search_path = find_env(spec, "PATH", "/usr/local/bin:/usr/bin:/bin");
    const auto rlimits = rlimits_for(spec.limits);

    Pipe sync = Pipe::create();
    Pipe errors = Pipe::create();
    Pipe reports = Pipe::create();
    std::optional<Pipe> out_pipe;
    std::optional<Pipe> err_pipe;
    UniqueFd dev_null;
    if (spec.stdio == StdioMode::kCapture) {
      out_pipe = Pipe::create();
      err_pipe = Pipe::create();
      dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!dev_null) throw SysError("open", "/dev/null", errno);
    }
    std::vector<int> keep = {sync.read.get(), errors.write.get(), reports.write.get()};
    if (out_pipe) keep.insert(keep.end(), {out_pipe->write.get(), err_pipe->write.get(), dev_null.get()});
    std::sort(keep.begin(), keep.end());

    ChildConfig config{
        .sync_fd = sync.read.get(),
        .error_fd = errors.write.get(),
        .report_fd = reports.write.get(),
        .stdin_fd = out_pipe ? dev_null.get() : -1,
        .stdout_fd = out_pipe ? out_pipe->write.get() : -1,
        .stderr_fd = err_pipe ? err_pipe->write.get() : -1,
        .keep_fds = keep.data(),
        .keep_fd_count = keep.size(),
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
        .caps = &caps_,
        .seccomp = seccomp_.program(),
    };

    SandboxProcess proc = clone_sandbox(config);
    sync.read.reset();
    errors.write.reset();
    reports.write.reset();
    dev_null.reset();
    std::optional<OutputCapture> out;
    std::optional<OutputCapture> err;
    if (out_pipe) {
      out_pipe->write.reset();
      err_pipe->write.reset();
      out.emplace(std::move(out_pipe->read), spec.limits.stdout_bytes);
      err.emplace(std::move(err_pipe->read), spec.limits.stderr_bytes);
    }

    write_id_maps(proc.pid(), spec.sandbox_uid, spec.sandbox_gid, host_ids_);
    // sync.write stays open until the run ends: the child treats its hang-up
    // as the supervisor's death.
    if (::write(sync.write.get(), "g", 1) != 1) throw SysError("write", "sandbox sync pipe", errno);

    const bool has_deadline = spec.limits.wall_time.count() > 0;
    Observation obs = supervise(proc, std::move(errors.read), std::move(reports.read),
                                out ? &*out : nullptr, err ? &*err : nullptr, cancel_fd,
                                start + spec.limits.wall_time, has_deadline);
    fill_outcome(obs, result);
    result.cpu_ms = to_ms(obs.usage.ru_utime) + to_ms(obs.usage.ru_stime);
    if (out) {
      result.stdout_data = std::move(out->data());
      result.stdout_truncated = out->truncated();
      result.stderr_data = std::move(err->data());
      result.stderr_truncated = err->truncated();
    }
  } catch (const SysError& e) {
    result = Result{};
    result.status = RunStatus::kSetupError;
    result.error = e.what();
    result.exit_code = kSetupFailedExit;
  }
  result.wall_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return result;
}

}  // namespace nsbox
