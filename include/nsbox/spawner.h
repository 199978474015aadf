// The node's spawner: a single-threaded process, forked before the HTTP
// server starts any thread, that launches sandboxes for it (DESIGN.md: the
// child of a multi-threaded process may only make raw syscalls, so the
// threaded server never clones a sandbox itself).
//
// Each job travels on its own socket pair: the server sends one end to the
// spawner over the control socket (SCM_RIGHTS), the spawner forks a worker
// that reads the job from it, runs the sandbox and writes the result back.
// The server shutting down its write half cancels the run (the worker's
// cancel fd turns readable); the server dying cancels every run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "nsbox/api.h"
#include "nsbox/pool.h"
#include "nsbox/runtime.h"
#include "nsbox/sandbox.h"
#include "nsbox/unique_fd.h"

namespace nsbox {

struct Job {
  std::string run_id;
  std::string profile_name;  // for errors
  std::string profile_yaml;  // the resolved profile (to_yaml), loaded by the worker
  RunRequest request;
  std::string rootfs;  // the profile's rootfs as named (rootfs_path), for routing
  // What rootfs resolved to as the node admitted the run (current_rootfs_tree):
  // the tree of its pool key, the tree a cold run is built on, and the
  // audit records' "rootfs".
  std::string rootfs_tree;
};

// What a worker answers: to_json(ExecOutcome) plus "exit_code", "signal",
// "limits" (what applied), "artifacts" with their content in base64, and
// "timeout_clamped" when the request asked for more than the profile allows.
using JobResult = nlohmann::ordered_json;

// How long the server waits for a job's answer: the run's time limit (the
// profile's; a request may ask for less), then the grace for its set-up
// and teardown, or the grace from its cancel if that comes first. Then the
// spawner kills the job's worker, and the answer is an error.
struct AnswerWait {
  std::chrono::milliseconds run_time;
  std::chrono::milliseconds grace;
};

class Spawner {
 public:
  // Forks the spawner, which waits for start(). Call only while the process
  // is single-threaded, and before it holds anything secret: the node's
  // config (its tenants' tokens) is read after, since every started
  // sandbox's PID 1 and every worker is a copy of the spawner's memory.
  static Spawner fork_waiting();
  // Sends the spawner its options (the cgroup parent; it detects the
  // host's cgroups itself); it builds its Launcher (cgroup detection, stale
  // run cleanup) and reports ready or the error, which is thrown here.
  void start(const LauncherOptions& options);

  Spawner(Spawner&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)),
        control_(std::move(other.control_)),
        send_mutex_(std::move(other.send_mutex_)),
        stats_(std::move(other.stats_)) {}
  Spawner& operator=(Spawner&&) = delete;
  ~Spawner();  // closes the control socket and waits for the spawner to exit

  // Thread-safe. Runs the job to completion and returns its result.
  // cancel_fd, when readable, cancels the run (the result then says killed).
  // A worker that does not answer within wait is killed. Throws SysError
  // when the spawner is gone.
  JobResult run(const Job& job, int cancel_fd, AnswerWait wait) const;

  // Thread-safe. What to keep warm from now on (see pool.h); sandboxes no
  // longer wanted are retired. memory_budget (bytes, 0: none) bounds what
  // the idle ones hold.
  void configure_pool(const std::vector<PoolEntry>& entries, uint64_t memory_budget) const;
  // The pool's counters, updated by the spawner.
  const PoolStats& pool_stats() const { return *stats_; }

  pid_t pid() const { return pid_; }
  // Thread-safe. False once the spawner has exited (killed, say): no run
  // can start any more.
  bool alive() const;

 private:
  // Has the spawner kill the worker answering the job on the socket of
  // this inode.
  void ask_to_kill_worker(ino_t job_socket) const;
  Spawner(pid_t pid, UniqueFd control, std::shared_ptr<PoolStats> stats)
      : pid_(pid), control_(std::move(control)), stats_(std::move(stats)) {}
  pid_t pid_ = -1;
  UniqueFd control_;
  std::unique_ptr<std::mutex> send_mutex_ = std::make_unique<std::mutex>();
  std::shared_ptr<PoolStats> stats_;
};

// The worker side, exposed for tests: runs job on launcher and builds the
// result (no fork, no sockets).
// fork_server, if >= 0, is the job's key's fork server (fork_server.h): a
// Python run of a profile that asks for one is forked by it. profiles, if
// given, may hold the job's profile already parsed.
JobResult run_job(const Launcher& launcher, const Job& job, int cancel_fd, int fork_server = -1,
                  const ParsedProfiles* profiles = nullptr);

}  // namespace nsbox
