#include "nsbox/spawner.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "nsbox/cgroup.h"
#include "nsbox/error.h"
#include "nsbox/fd_passing.h"
#include "nsbox/fork_server.h"
#include "nsbox/io.h"
#include "nsbox/job_stream.h"
#include "nsbox/pool.h"
#include "nsbox/profile_apply.h"
#include "nsbox/profile_loader.h"
#include "nsbox/units.h"
#include "nsbox/workspace.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;

constexpr char kReady = 'R';
constexpr char kFailed = 'E';
constexpr char kHostUnfit = 'H';  // kFailed for a HostError
constexpr char kOptions = 'O';
constexpr char kJob = 'J';
constexpr char kPool = 'P';
// The node gave up waiting for a job's answer: kill the worker that holds
// the job socket of this inode (8 bytes follow the tag).
constexpr char kKillWorker = 'K';
// How long the node waits for a worker it had killed to close its job
// socket (a process in uninterruptible sleep dies only when it wakes).
constexpr auto kKilledWorkerWait = std::chrono::seconds(5);
// The most a pool config may be (every tenant's resolved profile twice).
constexpr uint64_t kMaxPoolConfigBytes = 64ull << 20;
// A job is at most the body limit (1 GiB max) plus its profile.
constexpr uint64_t kMaxJobBytes = (1ull << 30) + (1ull << 20);

void send_job_fd(int control, int fd) {
  if (int err = send_fd(control, fd, kJob)) throw SysError("send job to spawner", "control socket", err);
}

// One message from the server on the control socket.
struct ControlMessage {
  enum class Kind { kEnd, kJobSocket, kPoolConfig, kWorkerToKill, kUnknown } kind = Kind::kUnknown;
  UniqueFd fd;           // kJobSocket, kPoolConfig (a pipe to read it from)
  ino_t job_socket = 0;  // kWorkerToKill: the inode of its job socket
};

ControlMessage receive_control(int control) {
  char buf[1 + sizeof(uint64_t)] = {};
  pid_t sender = 0;
  int fd = -1;
  const ssize_t n = receive_with_credentials(control, buf, sizeof buf, &sender, &fd);
  ControlMessage m;
  m.fd.reset(fd);
  if (n == 0) {
    m.kind = ControlMessage::Kind::kEnd;
  } else if (n == 1 && m.fd && buf[0] == kJob) {
    m.kind = ControlMessage::Kind::kJobSocket;
  } else if (n == 1 && m.fd && buf[0] == kPool) {
    m.kind = ControlMessage::Kind::kPoolConfig;
  } else if (n == sizeof buf && !m.fd && buf[0] == kKillWorker) {
    uint64_t inode = 0;
    std::memcpy(&inode, buf + 1, sizeof inode);
    m.kind = ControlMessage::Kind::kWorkerToKill;
    m.job_socket = static_cast<ino_t>(inode);
  } else {
    m.fd.reset();
  }
  return m;
}

ino_t inode_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

// Reads up to max bytes from fd until EOF, each read within timeout_ms;
// nullopt on timeout, error or overflow.
std::optional<std::string> read_bounded(int fd, size_t max, int timeout_ms) {
  std::string out;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max) return std::nullopt;
  }
}

// The routing header the server writes first on a job socket: one length
// byte and the job's pool key.
std::optional<std::string> read_job_key(int fd) {
  auto read_exactly = [&](char* p, size_t size) {
    while (size > 0) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 5000) <= 0) return false;
      ssize_t n = ::read(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  };
  unsigned char len = 0;
  if (!read_exactly(reinterpret_cast<char*>(&len), 1)) return std::nullopt;
  std::string key(len, '\0');
  if (!read_exactly(key.data(), len)) return std::nullopt;
  return key;
}

std::string base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

json encode_job(const Job& job) {
  json j;
  j["run_id"] = job.run_id;
  j["profile_name"] = job.profile_name;
  j["profile_yaml"] = job.profile_yaml;
  j["language"] = to_string(job.request.exec.language);
  j["code"] = job.request.exec.code;
  j["inputs"] = job.request.exec.inputs;
  if (job.request.timeout) j["timeout_ms"] = job.request.timeout->count();
  if (!job.rootfs_tree.empty()) j["rootfs_tree"] = job.rootfs_tree;
  return j;
}

Job decode_job(const std::string& text) {
  json j = json::parse(text);
  Job job;
  job.run_id = j.at("run_id").get<std::string>();
  job.profile_name = j.at("profile_name").get<std::string>();
  job.profile_yaml = j.at("profile_yaml").get<std::string>();
  job.request.exec.language = *parse_language(j.at("language").get<std::string>());
  job.request.exec.code = j.at("code").get<std::string>();
  job.request.exec.inputs = j.at("inputs");
  if (j.contains("timeout_ms")) job.request.timeout = std::chrono::milliseconds(j["timeout_ms"].get<int64_t>());
  job.rootfs_tree = j.value("rootfs_tree", "");
  return job;
}

json failure_result(const std::string& message) {
  return json{{"return", nullptr}, {"error", message}, {"status", "error"}, {"error_type", "sandbox"}};
}

// The profile's spec for a job. A run's artifacts come back in memory, to
// be sent in the answer.
RunSpec job_spec(const Profile& profile) {
  RunSpec spec = spec_from_profile(profile);
  if (spec.workspace) spec.workspace->keep_content = true;
  return spec;
}

// The request's timeout, within the profile's wall time; a warning when it
// asked for more.
std::optional<std::string> apply_request_timeout(const Job& job, RunSpec& spec) {
  if (!job.request.timeout) return std::nullopt;
  if (*job.request.timeout <= spec.limits.wall_time || spec.limits.wall_time.count() == 0) {
    spec.limits.wall_time = *job.request.timeout;
    return std::nullopt;
  }
  return "timeout " + format_duration(*job.request.timeout) + " exceeds the profile's limits.wall_time of " +
         format_duration(spec.limits.wall_time) + "; " + format_duration(spec.limits.wall_time) + " applied";
}

// Takes the outcome: each artifact's bytes are freed once encoded, so that a
// run's artifacts are not held twice over (raw and base64) at once.
json job_result(const Job& job, const Profile& profile, const RunSpec& spec, ExecOutcome&& outcome,
                const std::optional<std::string>& clamp_warning) {
  json j = to_json(outcome);
  j["run_id"] = job.run_id;
  j["profile"] = profile.name;
  j["language"] = to_string(job.request.exec.language);
  j["exit_code"] = outcome.run.exit_code;
  j["signal"] = outcome.run.signal ? json(*outcome.run.signal) : json(nullptr);
  j["limits"] = {{"wall_ms", spec.limits.wall_time.count()},
                 {"cpu_ms", spec.limits.cpu_time.count()},
                 {"memory_bytes", spec.limits.cgroup.memory_bytes},
                 {"pids", spec.limits.cgroup.pids}};
  if (clamp_warning) j["warnings"].push_back(*clamp_warning);
  j["artifacts"] = json::array();
  for (auto& a : outcome.run.artifacts) {
    j["artifacts"].push_back(
        {{"name", a.name}, {"size", a.size}, {"sha256", a.sha256}, {"content_base64", base64(a.content)}});
    std::string().swap(a.content);
  }
  j["artifacts_refused"] = outcome.run.artifacts_refused;
  return j;
}

std::string read_job(int fd) {
  uint64_t size = 0;
  if (read_full(fd, &size, sizeof size) != sizeof size || size > kMaxJobBytes)
    throw SysError("read job", "job socket", EPROTO);
  std::string text(size, '\0');
  if (read_full(fd, text.data(), size) != size) throw SysError("read job", "job socket", EPROTO);
  return text;
}

// Writes a worker's answer on the job's stream; nothing may unwind out of a
// forked worker into the server's main().
void send_result(JobStreamWriter& stream, const json& result) {
  try {
    stream.result(result.dump(-1, ' ', false, json::error_handler_t::replace));
  } catch (...) {
    // The server went away, or the result could not be written: the server
    // reports a worker that ended without a result.
  }
}

// The run fork_server forks for exec; null when the fork failed before any
// code of the run was sent (the fork server ended, or did not answer in
// time). The run is then started cold, as runs are while no fork server
// serves the key: a slower answer, never a weaker sandbox.
std::unique_ptr<PreparedRun> fork_run(const Launcher& launcher, const RunSpec& exec, int fork_server,
                                      const std::string& profile_name) {
  std::unique_ptr<PreparedRun> run = launcher.prepare_forked(exec, fork_server);
  if (run->pidfd() >= 0) return run;
  const Result failed = run->finish(std::nullopt, std::chrono::milliseconds(0));  // returns why at once
  spdlog::warn("fork server of profile {} could not fork a run, which is started cold instead: {}", profile_name,
               failed.error);
  return nullptr;
}

// run_job, but a run forked at the request is left in forked_run: its
// teardown waits for the run's whole pid namespace to end, so a worker
// answers first and lets it go after.
// journal is told each egress decision of the run as it is made.
JobResult run_job_leaving(const Launcher& launcher, const Job& job, int cancel_fd, int fork_server,
                          const ParsedProfiles* profiles, std::unique_ptr<PreparedRun>& forked_run,
                          const EgressJournal& journal = {}) {
  static const ParsedProfiles kNone;
  const std::shared_ptr<const Profile> parsed = (profiles ? *profiles : kNone).get(job.profile_name, job.profile_yaml);
  const Profile& profile = *parsed;
  RunSpec spec = job_spec(profile);
  if (!job.rootfs_tree.empty()) spec.rootfs = job.rootfs_tree;  // the tree it was routed by
  std::optional<std::string> clamp_warning = apply_request_timeout(job, spec);
  if (fork_server >= 0 && forks(profile, job.request.exec.language)) {
    // No warm sandbox was ready: the fork server forks one now, which is
    // still far cheaper than starting an interpreter.
    const RunSpec exec = exec_spec(spec, job.request.exec.language);
    forked_run = fork_run(launcher, exec, fork_server, profile.name);
    if (forked_run) {
      ExecOutcome outcome = finish_exec(*forked_run, exec, job.request.exec, cancel_fd, journal);
      JobResult result = job_result(job, profile, spec, std::move(outcome), clamp_warning);
      result["pool"] = "forked";
      return result;
    }
  }
  ExecOutcome outcome = run_exec(launcher, spec, job.request.exec, cancel_fd, journal);
  JobResult result = job_result(job, profile, spec, std::move(outcome), clamp_warning);
  result["pool"] = "cold";
  return result;
}

// What answers a job: runs it, leaving a run it forked in forked_run, and
// tells journal each egress decision as it is made.
using JobRunner = std::function<JobResult(std::unique_ptr<PreparedRun>& forked_run, const EgressJournal& journal)>;

// Answers on job_fd with what run gives, or why its sandbox could not be
// started, and closes job_fd; the run's egress decisions go ahead of it as
// they are made (job_stream.h). The server reads the answer to end of file:
// it is complete before the teardown of a run that run forked (left in
// forked_run), which waits for the run's whole pid namespace.
void answer(UniqueFd job_fd, const JobRunner& run) {
  std::unique_ptr<PreparedRun> forked_run;
  const auto stream = std::make_shared<JobStreamWriter>(job_fd.get());
  JobResult result;
  try {
    result = run(forked_run, journal_to(stream));
  } catch (const std::exception& e) {
    result = failure_result(std::string("The sandbox could not be started: ") + e.what());
  } catch (...) {
    result = failure_result("The sandbox could not be started: unknown error");
  }
  send_result(*stream, result);
  stream->end();  // also when the result could not be sent: nothing after it
  job_fd.reset();
}

// A worker's exit status when a run cgroup of its could not be removed
// (run_cgroup_left_behind): the spawner removes it once it can.
constexpr int kWorkerLeftACgroup = 3;

[[noreturn]] void exit_worker() { ::_exit(run_cgroup_left_behind() ? kWorkerLeftACgroup : 0); }

// A forked worker: one job, one sandbox, then _exit. It shares nothing with
// the other workers but the spawner's read-only state.
[[noreturn]] void worker_main(const Launcher& launcher, const ParsedProfiles& profiles, int job_fd, int fork_server) {
  ::prctl(PR_SET_NAME, "nsbox-worker", 0, 0, 0);
  answer(UniqueFd(job_fd), [&](std::unique_ptr<PreparedRun>& forked_run, const EgressJournal& journal) {
    return run_job_leaving(launcher, decode_job(read_job(job_fd)), job_fd, fork_server, &profiles, forked_run, journal);
  });
  exit_worker();
}

// What waits on a pool worker's control socket: nothing yet, a job (the
// pool sends nothing else), or end of file (the pool retired the sandbox).
enum class Queued { kNothing, kJobQueued, kRetired };

Queued peek_control(int ctl) {
  switch (pending_message(ctl)) {
    case Pending::kMessage:
      return Queued::kJobQueued;
    case Pending::kNothing:
      return Queued::kNothing;
    case Pending::kClosed:
      break;
  }
  return Queued::kRetired;
}

// Waits for the runner's start-up, at most 10 s (one that takes longer is
// offered anyway: a run on it only waits for the rest). A job the pool
// gives this sandbox meanwhile (none was ready) raises its CPU weight to
// the default: a request now waits for it. False when the pool retired it.
bool wait_until_ready(PreparedRun& prepared, int ctl) {
  constexpr std::chrono::milliseconds kHurriedCheck{2}, kRefillCheck{20};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool hurried = false;
  while (prepared.pidfd() >= 0) {
    if (!hurried) {
      const Queued queued = peek_control(ctl);
      if (queued == Queued::kRetired) return false;
      if (queued == Queued::kJobQueued) {
        prepared.restore_cpu_weight();  // when it cannot, finish() tries again and warns
        hurried = true;
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // A request waiting for it is answered as soon as it is ready; a refill
    // is looked at less often, since each look interrupts a start-up.
    if (left.count() <= 0 || prepared.wait_for_input(left, hurried ? kHurriedCheck : kRefillCheck, hurried ? -1 : ctl))
      return true;
    // It ended, or is slow; else the control socket woke it.
    if (hurried || peek_control(ctl) == Queued::kNothing) return true;
  }
  return true;
}

// The job the pool sends once the sandbox is ready (or sent while it
// started), or -1 when the pool retired it or the sandbox ended first.
int wait_for_job(int ctl, int sandbox_pidfd) {
  for (;;) {
    pollfd fds[2] = {{ctl, POLLIN, 0}, {sandbox_pidfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (fds[1].revents) return -1;  // the sandbox ended while waiting
    char tag = 0;
    const int job_fd = receive_fd(ctl, &tag);
    if (job_fd >= 0 && tag == kJob) return job_fd;
    if (job_fd >= 0) ::close(job_fd);
    if (job_fd == -1) return -1;  // retired
  }
}

// Whether a job is of entry's key: only then may entry's warm sandbox run
// it, or entry's fork server fork it.
bool of_key(const Job& job, const PoolEntry& entry) {
  return job.profile_yaml == entry.profile_yaml && job.request.exec.language == entry.language;
}

// A worker that will not serve: from now on the pool's sends to it fail
// (the pool then tries another sandbox), so no job waits on it, and none
// can arrive after its last look and be dropped at exit.
void stop_taking_jobs(int ctl) { ::shutdown(ctl, SHUT_RD); }

// A pool worker whose sandbox failed or ended before serving: a job the
// pool gave it meanwhile still gets an answer, from a sandbox of its own,
// as a miss would: forked by fork_server (-1: none), else started cold.
// The caller has stopped taking jobs (stop_taking_jobs): none may arrive
// after this look and be dropped.
void answer_queued_job(const Launcher& launcher, const ParsedProfiles& profiles, const PoolEntry& entry, int ctl,
                       int fork_server) {
  if (peek_control(ctl) != Queued::kJobQueued) return;
  char tag = 0;
  UniqueFd job_fd(receive_fd(ctl, &tag));
  if (!job_fd || tag != kJob) return;
  const int fd = job_fd.get();
  answer(std::move(job_fd), [&](std::unique_ptr<PreparedRun>& forked_run, const EgressJournal& journal) {
    const Job job = decode_job(read_job(fd));
    return run_job_leaving(launcher, job, fd, of_key(job, entry) ? fork_server : -1, &profiles, forked_run, journal);
  });
}

// How a sandbox that was not stopped by nsbox ended, for the node's log.
std::string how_it_ended(const Result& r) {
  return !r.error.empty() ? r.error
         : r.signal       ? "killed by signal " + std::to_string(*r.signal)
                          : "exit code " + std::to_string(r.exit_code);
}

// The pool sees only that a warm sandbox is gone: the node's log says why.
// Nothing it throws may unwind out of the worker.
void log_why_it_ended(PreparedRun& prepared, const PoolEntry& entry) noexcept {
  try {
    const bool started = prepared.pidfd() >= 0;
    if (started && !readable_now(prepared.pidfd())) return;  // retired, not ended
    // It has ended: finish() only collects how. A shorter bound could pass
    // before it has read PID 1's report, and say "killed" instead.
    const Result r = prepared.finish(std::nullopt, std::chrono::seconds(2));
    spdlog::warn("a warm {} sandbox of profile {} {}: {} {}", to_string(entry.language), entry.profile_name,
                 started ? "ended before it served a run" : "could not be started", how_it_ended(r),
                 printable(std::string_view(r.stderr_data).substr(0, 2000)));
  } catch (...) {
    // The log line is lost; the sandbox is still torn down.
  }
}

// Starts entry's sandbox, says on ctl when it is ready, and returns the job
// the pool then gives it (or gave it while it started). No job when the
// pool retired it, or when it failed or ended first.
UniqueFd start_and_wait_for_job(std::unique_ptr<PreparedRun>& prepared, const Launcher& launcher, const RunSpec& spec,
                                int ctl, int fork_server) {
  // Only a started sandbox yields to the runs being served: a forked one's
  // set-up holds the key's fork server (see prepare_forked).
  prepared = fork_server >= 0 ? launcher.prepare_forked(spec, fork_server) : launcher.prepare(spec, kWarmingCpuWeight);
  if (!wait_until_ready(*prepared, ctl)) return UniqueFd();  // retired while it started
  UniqueFd job_fd;
  // Not offered when it ended in its start-up: counted as ready, it would
  // be replaced at once, and a runner that always dies so would be started
  // again and again instead of after the pool's back-off.
  if (prepared->pidfd() >= 0 && !readable_now(prepared->pidfd())) {
    PoolReady ready;
    const int64_t memory = prepared->memory_bytes();
    ready.memory_bytes = memory > 0 ? static_cast<uint64_t>(memory) : 0;
    // Fails when the pool has closed its end: it gave this sandbox a job
    // while it started (queued, received below), or retired it.
    ::send(ctl, &ready, sizeof ready, MSG_NOSIGNAL);
    job_fd.reset(wait_for_job(ctl, prepared->pidfd()));
  }
  return job_fd;
}

// A pool worker: starts a sandbox for entry ahead of any request, says so on
// ctl, and waits. A job fd on ctl runs the job in it; ctl closing (retired)
// or the sandbox dying ends it. Either way the sandbox is torn down before
// the worker exits.
void pool_worker_main(const Launcher& launcher, const ParsedProfiles& profiles, const PoolEntry& entry, int ctl,
                      int fork_server_fd) {
  ::prctl(PR_SET_NAME, "nsbox-warm", 0, 0, 0);
  // Kept to the end: a job given to this sandbox while it was being forked
  // is forked again by it if this one fails.
  const UniqueFd fork_server(fork_server_fd);
  std::shared_ptr<const Profile> profile;
  RunSpec spec;
  std::unique_ptr<PreparedRun> prepared;
  UniqueFd job_fd;
  try {
    profile = profiles.get(entry.profile_name, entry.profile_yaml);
    spec = exec_spec(job_spec(*profile), entry.language);
    if (!entry.rootfs_tree.empty()) spec.rootfs = entry.rootfs_tree;  // the tree of its key
    job_fd = start_and_wait_for_job(prepared, launcher, spec, ctl, fork_server.get());
  } catch (const std::exception& e) {
    spdlog::warn("a warm {} sandbox of profile {} {}: {}", to_string(entry.language), entry.profile_name,
                 prepared ? "failed" : "could not be started", e.what());
  } catch (...) {
    spdlog::warn("a warm {} sandbox of profile {} {}: unknown error", to_string(entry.language), entry.profile_name,
                 prepared ? "failed" : "could not be started");
  }
  if (!job_fd) {
    stop_taking_jobs(ctl);  // first: the log and the teardown take time
    if (prepared) log_why_it_ended(*prepared, entry);
    prepared.reset();
    answer_queued_job(launcher, profiles, entry, ctl, fork_server.get());
    return;
  }
  const int fd = job_fd.get();
  answer(std::move(job_fd), [&](std::unique_ptr<PreparedRun>& forked_run, const EgressJournal& journal) {
    const Job job = decode_job(read_job(fd));
    if (!of_key(job, entry)) {
      // Routed by a key that does not match: never run it in this sandbox.
      prepared.reset();
      return run_job_leaving(launcher, job, fd, -1, &profiles, forked_run, journal);
    }
    std::optional<std::string> clamp_warning = apply_request_timeout(job, spec);
    ExecOutcome outcome = finish_exec(*prepared, spec, job.request.exec, fd, journal);
    JobResult result = job_result(job, *profile, spec, std::move(outcome), clamp_warning);
    result["pool"] = "warm";
    return result;
  });
  // Every process of the run is gone; reaping PID 1 (which takes the
  // namespaces with it) and removing the cgroup and the workspace need not
  // delay the answer: prepared goes now.
}

// The pids of pid's children (/proc/PID/task/PID/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t child; in >> child;) out.push_back(child);
  return out;
}

// What a zygote writes (its warnings) goes to the node's log, line by line,
// as it comes: read while it starts and while it serves.
void log_what_it_wrote(PreparedRun& zygote, const std::string& profile_name) {
  zygote.drain_output(
      [&](std::string_view line) { spdlog::warn("fork server of profile {}: {}", profile_name, printable(line)); });
}

// Until the zygote waits for its first request (its start-up is done), at
// most kForkServerStartTimeout; false when it ended, did not get there, or
// the key was retired meanwhile.
bool wait_until_it_serves(PreparedRun& zygote, int ctl, const std::string& profile_name) {
  const auto deadline = std::chrono::steady_clock::now() + kForkServerStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (zygote.wait_for_fork_requests(std::chrono::milliseconds(50), ctl)) return true;
    if (readable_now(zygote.pidfd()) || readable_now(ctl)) return false;
    log_what_it_wrote(zygote, profile_name);  // else it would stall on a full pipe
  }
  return false;
}

// Returns when the fork server's sandbox ended, or when ctl closed and every
// run it forked has ended too (or their wall time is over). A forked run's
// PID 1 is a child of the zygote (if the zygote dies, its sandbox's PID 1
// ends, and every run with it).
void wait_while_fork_server_serves(PreparedRun& zygote, int ctl, std::chrono::milliseconds wall_time,
                                   const std::string& profile_name) {
  std::optional<std::chrono::steady_clock::time_point> retired_at;
  const auto grace = wall_time + std::chrono::seconds(5);
  for (;;) {
    std::vector<pollfd> fds = {{zygote.pidfd(), POLLIN, 0}, {retired_at ? -1 : ctl, POLLIN, 0}};
    for (int fd : zygote.output_fds()) fds.push_back({fd, POLLIN, 0});
    int ready = ::poll(fds.data(), fds.size(), retired_at ? 50 : -1);
    if (ready < 0 && errno != EINTR) return;
    if (ready > 0) log_what_it_wrote(zygote, profile_name);
    if (fds[0].revents) return;
    if (fds[1].revents) retired_at = std::chrono::steady_clock::now();
    if (!retired_at) continue;
    // Done when only the zygote is left beside PID 1 and it has no child
    // (a run, or one being set up) either.
    const std::vector<pid_t> left = children_of(zygote.pid());
    const bool idle = left.size() <= 1 && (left.empty() || children_of(left[0]).empty());
    if (idle || std::chrono::steady_clock::now() - *retired_at > grace) return;
  }
}

// A fork server keeper: runs the key's fork server (fork_server.h) with
// fork_server_end as its request socket and says 'R' on ctl when it serves.
// When ctl closes (the key is retired) the runs it forked may still be
// running: they live in the fork server's pid namespace, so it is torn down
// only once they have ended, or after their wall time.
void fork_server_keeper_main(const Launcher& launcher, const ParsedProfiles& profiles, const PoolEntry& entry, int ctl,
                             int fork_server_end) {
  ::prctl(PR_SET_NAME, "nsbox-zygote", 0, 0, 0);
  try {
    const std::shared_ptr<const Profile> parsed = profiles.get(entry.profile_name, entry.profile_yaml);
    const Profile& profile = *parsed;
    RunSpec run_spec = exec_spec(job_spec(profile), entry.language);
    if (!entry.rootfs_tree.empty()) run_spec.rootfs = entry.rootfs_tree;  // the tree of its key
    std::unique_ptr<PreparedRun> zygote = launcher.prepare(fork_server_spec(run_spec, fork_server_end));
    ::close(fork_server_end);
    // Ready once the zygote waits for its first request: no fork is asked
    // of it before (runs meanwhile start cold), so a fork's step timeout
    // never counts the zygote's own start-up, and the memory it reports is
    // what the started zygote holds.
    if (zygote->pidfd() >= 0 && wait_until_it_serves(*zygote, ctl, entry.profile_name)) {
      PoolReady ready;
      const int64_t memory = zygote->memory_bytes();
      ready.memory_bytes = memory > 0 ? static_cast<uint64_t>(memory) : 0;
      ::send(ctl, &ready, sizeof ready, MSG_NOSIGNAL);
      wait_while_fork_server_serves(*zygote, ctl, run_spec.limits.wall_time, entry.profile_name);
    } else if (zygote->pidfd() >= 0 && !readable_now(zygote->pidfd()) && !readable_now(ctl)) {
      spdlog::error("fork server of profile {} did not start serving within {} s; started again later",
                    entry.profile_name, kForkServerStartTimeout.count());
    }
    // Ended by itself: its end is collected (a bound of 1 ms could pass
    // before PID 1's report is read, and say nothing of how); else stopped
    // by us at once.
    const bool ended = zygote->pidfd() >= 0 && readable_now(zygote->pidfd());
    Result r = zygote->finish(std::nullopt, ended ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(1));
    if (r.status != RunStatus::kTimeout)  // anything but our own stop
      spdlog::error("fork server of profile {} ended: {} {}", entry.profile_name, how_it_ended(r),
                    printable(std::string_view(r.stderr_data).substr(0, 2000)));
  } catch (const std::exception& e) {
    spdlog::error("fork server of profile {} could not be started: {}", entry.profile_name, e.what());
  }
}

void ignore_terminal_signals() {
  // The server decides when runs end: a Ctrl-C meant for it must not kill
  // the spawner or a worker mid-cleanup.
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
}

// Who answers each job the spawner handed on: the worker's pid by the
// inode of the job's socket, which the server knows too. A pid stays here
// until the spawner reaps it, so it is never another process's.
using Answering = std::map<ino_t, pid_t>;

// Which of the workers reaped may have left what their runs held.
struct Reaped {
  bool killed = false;       // SIGKILL, the OOM killer: it removed nothing
  bool left_cgroup = false;  // a run cgroup still held a process it could not end
};

Reaped reap(std::set<pid_t>& workers, WarmPool& pool, Answering& answering) {
  int status;
  pid_t pid;
  Reaped reaped;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    workers.erase(pid);
    pool.forget(pid);
    std::erase_if(answering, [pid](const auto& job) { return job.second == pid; });
    reaped.killed = reaped.killed || WIFSIGNALED(status);
    reaped.left_cgroup = reaped.left_cgroup || (WIFEXITED(status) && WEXITSTATUS(status) == kWorkerLeftACgroup);
  }
  return reaped;
}

// The server gave up waiting for a job's answer (a worker stopped, or stuck
// in a bug): its worker is killed, and reaping it removes what it held.
void kill_worker_of(const Answering& answering, ino_t job_socket) {
  const auto it = answering.find(job_socket);
  if (it == answering.end()) {
    spdlog::warn("spawner: the server gave up on a job no worker of its has (it ended, or never got the job)");
    return;
  }
  spdlog::warn("spawner: killing worker {}: the server gave up waiting for its answer", it->second);
  if (::kill(it->second, SIGKILL) != 0) spdlog::error("spawner: kill worker {}: {}", it->second, std::strerror(errno));
}

// What ended workers left (a killed one's run cgroups, workspace and tmpfs;
// a run cgroup whose process SIGKILL had not ended yet) goes as soon as it
// can, not at the node's next start: it is named after its worker, which is
// gone. A cgroup that still holds such a process is swept again every few
// seconds, with a short wait each time, until it can be removed.
class LeftBehind {
 public:
  static constexpr auto kShortWait = std::chrono::milliseconds(20);

  void sweep(const Launcher& launcher, std::chrono::milliseconds wait) {
    bool again = true;  // a sweep that fails is tried again, with what was known left kept
    try {
      // Cgroups known to hold a stuck process are not waited for again.
      const StaleSweep cgroups = remove_stale_run_cgroups(launcher.cgroup_host(), left_.empty() ? wait : kShortWait);
      const int removed = cgroups.removed + remove_stale_workspaces(launcher.host_ids().uid);
      if (removed > 0) spdlog::warn("spawner: removed {} run cgroups and workspaces that ended workers left", removed);
      log_change(cgroups.left);
      left_ = cgroups.left;
      again = !left_.empty();
    } catch (const std::exception& e) {
      spdlog::error("spawner: removing what ended workers left (tried again in {} s): {}", kInterval.count(), e.what());
    }
    next_ = again ? std::optional(std::chrono::steady_clock::now() + kInterval) : std::nullopt;
  }
  // How long until the next sweep is due; none while nothing is left to retry.
  std::optional<std::chrono::milliseconds> until_next() const {
    if (!next_) return std::nullopt;
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(*next_ - std::chrono::steady_clock::now()));
  }
  bool due() const { return next_ && std::chrono::steady_clock::now() >= *next_; }

 private:
  static constexpr auto kInterval = std::chrono::seconds(5);

  void log_change(const std::vector<std::string>& left) const {
    if (!left.empty() && left != left_)
      spdlog::warn(
          "spawner: run cgroups still hold a process that SIGKILL has not ended (stuck in the kernel: a stalled "
          "NFS or FUSE file, memory pressure); removing them again every {} s: {}",
          kInterval.count(), joined(left));
    else if (left.empty() && !left_.empty())
      spdlog::info("spawner: the run cgroups left behind are removed");
  }

  static std::string joined(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
  }

  std::vector<std::string> left_;
  std::optional<std::chrono::steady_clock::time_point> next_;
};

// A pool config from the server: JSON on the pipe whose read end came with
// the message.
void configure_pool(WarmPool& pool, ParsedProfiles& profiles, int fd) {
  auto text = read_bounded(fd, kMaxPoolConfigBytes, 5000);
  if (!text) return;
  try {
    uint64_t budget = 0;
    auto entries = pool_entries_from_json(json::parse(*text), budget);
    profiles.keep(entries);
    pool.configure(std::move(entries), budget);
  } catch (const std::exception&) {
    // A malformed config from our own server: keep the previous one.
  }
}

// The options start() sends: kOptions and the cgroup parent.
std::optional<LauncherOptions> receive_options(int control) {
  char buf[PATH_MAX + 2];
  ssize_t n;
  do n = ::recv(control, buf, sizeof buf, 0);
  while (n < 0 && errno == EINTR);
  if (n < 1 || buf[0] != kOptions) return std::nullopt;
  return LauncherOptions{.cgroup_parent = std::string(buf + 1, static_cast<size_t>(n - 1)),
                         .cgroup_host = std::nullopt};
}

[[noreturn]] void spawner_main(UniqueFd control, PoolStats* stats) {
  ::prctl(PR_SET_NAME, "nsbox-spawner", 0, 0, 0);
  ignore_terminal_signals();
  const std::optional<LauncherOptions> options = receive_options(control.get());
  if (!options) ::_exit(0);  // the node stopped before it started us (a bad config)
  std::optional<Launcher> launcher;
  try {
    launcher.emplace(*options);
    // An nsbox killed without warning (or the host's power lost) left them.
    if (launcher->stale_removed() > 0)
      spdlog::warn("spawner: removed {} run cgroups and workspaces left by nsbox processes that died mid-run",
                   launcher->stale_removed());
  } catch (const std::exception& e) {
    std::string msg = (dynamic_cast<const HostError*>(&e) ? kHostUnfit : kFailed) + std::string(e.what());
    ::send(control.get(), msg.data(), msg.size(), MSG_NOSIGNAL);
    ::_exit(1);
  }
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, &old);
  UniqueFd sfd(::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
  // In a forked child: drop what belongs to the spawner.
  auto become_child = [&] {
    control.reset();
    sfd.reset();
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
  };
  ParsedProfiles profiles;
  WarmPool pool(
      stats,
      [&](const PoolEntry& entry, int ctl, int fork_server) {
        become_child();
        pool_worker_main(*launcher, profiles, entry, ctl, fork_server);
        exit_worker();  // after the sandbox, its cgroup and workspace are gone
      },
      [&](const PoolEntry& entry, int ctl, int fork_server_end) {
        become_child();
        fork_server_keeper_main(*launcher, profiles, entry, ctl, fork_server_end);
        exit_worker();
      });
  ::send(control.get(), &kReady, 1, MSG_NOSIGNAL);
  std::set<pid_t> workers;
  Answering answering;
  LeftBehind left_behind;
  bool closing = false;
  while (!closing || !workers.empty()) {
    std::vector<pollfd> fds = {{sfd.get(), POLLIN, 0}, {closing ? -1 : control.get(), POLLIN, 0}};
    pool.add_pollfds(fds);
    // Wakes up for a key held back (after failures, or a take's refill
    // delay), to start it, and for a sweep of what workers left.
    std::optional<std::chrono::milliseconds> wake = closing ? std::nullopt : pool.next_retry();
    if (const auto sweep = left_behind.until_next(); sweep && (!wake || *sweep < *wake)) wake = sweep;
    const int timeout = !wake ? -1 : static_cast<int>(std::min<int64_t>(wake->count(), 60000));
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) ::_exit(1);
    if (fds[0].revents) {
      signalfd_siginfo info;
      while (::read(sfd.get(), &info, sizeof info) > 0) {
      }
      // A killed worker's processes die at once: they are waited for. A
      // process SIGKILL has not ended in a second is not waited for again.
      const Reaped reaped = reap(workers, pool, answering);
      if (reaped.killed || reaped.left_cgroup)
        left_behind.sweep(*launcher, reaped.killed ? kRunCgroupEmptyWait : LeftBehind::kShortWait);
    }
    if (left_behind.due()) left_behind.sweep(*launcher, LeftBehind::kShortWait);
    pool.on_events(fds);
    if (fds[1].revents) {
      ControlMessage m = receive_control(control.get());
      switch (m.kind) {
        case ControlMessage::Kind::kEnd:
          closing = true;  // the server is gone or done: finish the runs, then exit
          pool.retire_all();
          break;
        case ControlMessage::Kind::kPoolConfig:
          configure_pool(pool, profiles, m.fd.get());
          break;
        case ControlMessage::Kind::kWorkerToKill:
          kill_worker_of(answering, m.job_socket);
          break;
        case ControlMessage::Kind::kJobSocket: {
          const std::optional<std::string> key = read_job_key(m.fd.get());
          if (!key) break;  // no routing header: closing the job fd tells the server
          pid_t pid = pool.take(*key, m.fd.get());
          if (pid == 0) {
            pid = ::fork();
            if (pid == 0) {
              become_child();
              UniqueFd fork_server(
                  pool.fork_server_for(*key) >= 0 ? ::fcntl(pool.fork_server_for(*key), F_DUPFD_CLOEXEC, 0) : -1);
              pool.close_in_child();
              worker_main(*launcher, profiles, m.fd.release(), fork_server.release());
            }
          }
          // On fork failure closing the job fd tells the server.
          try {
            if (pid > 0) {
              workers.insert(pid);  // a pool worker's pid is there already
              answering[inode_of(m.fd.get())] = pid;
            }
          } catch (...) {
            // Out of memory: the worker is still reaped by waitpid(-1), and
            // the server gives up on its job in time without it.
          }
          break;
        }
        case ControlMessage::Kind::kUnknown:
          break;  // an error or a message the server never sends
      }
    }
    if (!closing) {
      std::vector<pid_t> started;
      pool.refill(started);
      workers.insert(started.begin(), started.end());
    }
  }
  left_behind.sweep(*launcher, kRunCgroupEmptyWait);
  launcher.reset();  // every run is over: its cgroup parents go too
  ::_exit(0);
}

}  // namespace

Spawner Spawner::fork_waiting() {
  // The pool's counters live in a page shared with the spawner.
  void* page = ::mmap(nullptr, sizeof(PoolStats), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) throw SysError("mmap", "pool statistics", errno);
  std::shared_ptr<PoolStats> stats(new (page) PoolStats, [](PoolStats* p) {
    p->~PoolStats();
    ::munmap(p, sizeof(PoolStats));
  });
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw SysError("socketpair", "spawner control", errno);
  UniqueFd parent(sv[0]), child(sv[1]);
  pid_t pid = ::fork();
  if (pid < 0) throw SysError("fork", "spawner", errno);
  if (pid == 0) {
    parent.reset();
    try {
      spawner_main(std::move(child), stats.get());
    } catch (...) {
      ::_exit(1);  // never unwind into the server's code in a forked copy
    }
  }
  child.reset();
  return Spawner(pid, std::move(parent), std::move(stats));
}

void Spawner::start(const LauncherOptions& options) {
  if (options.cgroup_host) throw std::invalid_argument("the spawner detects the host's cgroups itself");
  if (options.cgroup_parent.size() > PATH_MAX) throw UsageError("cgroup_parent is longer than PATH_MAX");
  const std::string message = kOptions + options.cgroup_parent;
  if (::send(control_.get(), message.data(), message.size(), MSG_NOSIGNAL) < 0)
    throw SysError("send", "spawner options", errno);
  char buf[4096];
  ssize_t n;
  do n = ::recv(control_.get(), buf, sizeof buf, 0);
  while (n < 0 && errno == EINTR);
  if (n == 1 && buf[0] == kReady) return;
  const std::string why = n > 1 ? std::string(buf + 1, static_cast<size_t>(n - 1)) : "";
  if (n > 1 && buf[0] == kHostUnfit) throw HostError("the spawner could not start: " + why);
  if (n > 1 && buf[0] == kFailed) throw UsageError("the spawner could not start: " + why);
  throw SysError("start", "spawner", n < 0 ? errno : EPIPE);
}

Spawner::~Spawner() {
  if (pid_ <= 0) return;
  control_.reset();
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool Spawner::alive() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  // WNOWAIT: looked at, not reaped (the destructor reaps it).
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == EINTR;
  return info.si_pid == 0;
}

void Spawner::ask_to_kill_worker(ino_t job_socket) const {
  char message[1 + sizeof(uint64_t)] = {kKillWorker};
  const uint64_t inode = job_socket;
  std::memcpy(message + 1, &inode, sizeof inode);
  std::lock_guard<std::mutex> lock(*send_mutex_);
  if (::send(control_.get(), message, sizeof message, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof message))
    spdlog::error("asking the spawner to kill a worker: {}", std::strerror(errno));
}

JobResult Spawner::run(const Job& job, int cancel_fd, AnswerWait wait) const {
  // Encoded before the spawner is told: it waits for the routing header
  // with a deadline, and its loop serves every other job meanwhile.
  const std::string key = pool_key(job.profile_yaml, job.request.exec.language, job.rootfs_tree);
  const std::string text = encode_job(job).dump(-1, ' ', false, json::error_handler_t::replace);
  // The routing header (the spawner reads it and gives the job to a warm
  // sandbox of this key when one is ready) with the job's size, which the
  // sandbox's worker reads before the text.
  const uint64_t size = text.size();
  std::string header(1, static_cast<char>(key.size()));
  header += key;
  header.append(reinterpret_cast<const char*>(&size), sizeof size);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw SysError("socketpair", "job", errno);
  UniqueFd mine(sv[0]), theirs(sv[1]);
  const ino_t job_socket = inode_of(theirs.get());
  {
    std::lock_guard<std::mutex> lock(*send_mutex_);
    send_job_fd(control_.get(), theirs.get());
  }
  theirs.reset();
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + wait.run_time + wait.grace;
  // The job is written with the same deadline: a stopped worker's socket
  // buffer fills up.
  if (!write_full_before(mine.get(), header, deadline, "send job", "job socket") ||
      !write_full_before(mine.get(), text, deadline, "send job", "job socket"))
    deadline = Clock::now();  // the worker did not take its job in all that time
  JobStreamReader stream;
  bool broken = false;  // said once
  bool cancelled = false;
  bool killed = false;                     // the worker, by the spawner, when it did not answer
  const char* waited_past = "time limit";  // what the grace was counted from when it was killed
  char buf[65536];
  for (;;) {
    pollfd fds[2] = {{mine.get(), POLLIN, 0}, {cancelled ? -1 : cancel_fd, POLLIN, 0}};
    const int ready = ::poll(fds, 2, ms_until(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw SysError("poll", "job socket", errno);
    }
    if (ready == 0 && killed) break;  // still no end of it: given up
    if (ready == 0) {
      spdlog::warn("run {}: its worker did not answer within {} of the run's {}: killing the worker", job.run_id,
                   format_duration(wait.grace), cancelled ? "cancel" : "time limit");
      ask_to_kill_worker(job_socket);
      killed = true;
      if (cancelled) waited_past = "cancel";
      deadline = Clock::now() + kKilledWorkerWait;
      continue;
    }
    if (fds[1].revents) {
      // Half-close: the worker's cancel fd turns readable, it tears the
      // sandbox down and still answers, within the grace.
      ::shutdown(mine.get(), SHUT_WR);
      cancelled = true;
      if (!killed) deadline = std::min(deadline, Clock::now() + wait.grace);
    }
    if (!fds[0].revents) continue;
    ssize_t n = ::read(mine.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    // A worker that ended before reading all its job resets the socket:
    // the same end as any other.
    if (n < 0 && errno == ECONNRESET) break;
    if (n < 0) throw SysError("read result", "job socket", errno);
    if (n == 0) break;
    if (!stream.feed(std::string_view(buf, static_cast<size_t>(n))) && !broken) {
      broken = true;
      spdlog::warn("run {}: its worker's answer is not a job stream; what came after is ignored", job.run_id);
    }
  }
  auto result = stream.has_result() ? json::parse(stream.take_result_text(), nullptr, false) : json(nullptr);
  if ((result.is_discarded() || !result.is_object()) && killed)
    result = failure_result("The sandbox worker did not answer within " + format_duration(wait.grace) + " of the " +
                            "run's " + waited_past + ": it was killed");
  else if (result.is_discarded() || !result.is_object())
    result = failure_result("The sandbox worker ended without a result");
  stream.fill_network(result);
  return result;
}

void Spawner::configure_pool(const std::vector<PoolEntry>& entries, uint64_t memory_budget) const {
  const std::string text = to_json(entries, memory_budget).dump();
  Pipe pipe = Pipe::create();
  {
    std::lock_guard<std::mutex> lock(*send_mutex_);
    if (int err = send_fd(control_.get(), pipe.read.get(), kPool))
      throw SysError("send pool config", "control socket", err);
  }
  pipe.read.reset();
  write_full(pipe.write.get(), text, "write", "pool config");
}

JobResult run_job(const Launcher& launcher, const Job& job, int cancel_fd, int fork_server,
                  const ParsedProfiles* profiles) {
  std::unique_ptr<PreparedRun> forked_run;
  return run_job_leaving(launcher, job, cancel_fd, fork_server, profiles, forked_run);
}

}  // namespace nsbox
