// Warm sandboxes for the node: per (profile, language) a few sandboxes are
// started ahead of their run (namespaces, cgroup, mounts, seccomp in place,
// the runner started and waiting for its request on stdin), each held by a
// pool worker forked by the spawner. A request takes one, the sandbox runs
// it and is destroyed: never reused. WarmPool is the spawner's bookkeeping:
// single-threaded, like the spawner.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nsbox/profile.h"
#include "nsbox/runtime.h"
#include "nsbox/unique_fd.h"

namespace nsbox {

// What to keep warm: `size` sandboxes of profile_yaml (a resolved profile,
// to_yaml) for language.
struct PoolEntry {
  std::string key;  // pool_key(profile_yaml, language)
  std::string profile_name;
  std::string profile_yaml;
  Language language = Language::kPython;
  uint32_t size = 0;
  // The profile asks for a fork server for this language: the key's warm
  // sandboxes are forked by one zygote, kept by a fork server keeper.
  bool fork_server = false;
  // The profile's rootfs as named, and the tree it resolved to when the
  // entry was made (part of the key): the key's sandboxes are built on
  // that tree, whatever the name points at when they start.
  std::string rootfs{};
  std::string rootfs_tree{};
};

// The CPU weight (cgroup v2 units, the default is 100) a started warm
// sandbox starts up with: when the CPUs are busy, the runs being served go
// first and the refills take what is left. Restored to the default when a
// run takes it. Forked ones set up at the default (prepare_forked).
constexpr uint32_t kWarmingCpuWeight = 1;

// How many warm sandboxes of one key start up at once; the rest of a refill
// waits until one is ready.
constexpr uint32_t kMaxStartingPerKey = 2;

// A take's replacement starts this long after the take, not at once: the
// run just taken then has the CPUs to itself for the first part of its
// path (on 2 cores, a refill's start-up takes both for a while). Only a
// take from a full key sets it: takes that follow while a refill is pending
// do not push it further, so a steady stream of takes still refills.
constexpr std::chrono::milliseconds kRefillDelay{5};

// After a warm sandbox (or fork server) of a key ends before it was ready,
// the key's next start waits: 100 ms, doubling with each failure in a row,
// at most 10 s. One that becomes ready resets it.
constexpr std::chrono::milliseconds kFirstRetryDelay{100};
constexpr std::chrono::milliseconds kMaxRetryDelay{10000};

// The key a job is routed by: sha256 of the profile, the language and the
// tree its rootfs resolves to (current_rootfs_tree): a rootfs swapped
// under a running node (tools/build-rootfs) routes runs to cold sandboxes
// on the new tree, not to warm ones or a fork server on the old, until a
// reload re-keys the pool.
std::string pool_key(const std::string& profile_yaml, Language language, const std::string& rootfs_tree = "");

// The directory rootfs (a profile's, as named) resolves to now, or rootfs
// itself when it does not resolve (the run's set-up then says why).
std::string current_rootfs_tree(const std::string& rootfs);

nlohmann::ordered_json to_json(const std::vector<PoolEntry>& entries, uint64_t memory_budget);
// Throws nlohmann::json::exception or UsageError on a malformed config.
std::vector<PoolEntry> pool_entries_from_json(const nlohmann::ordered_json& j, uint64_t& memory_budget);

// The pool keys' profiles, parsed once by the spawner when a pool config
// arrives. The workers it forks inherit them: a warm sandbox, or a job of a
// pooled profile, then costs no YAML parse of its own.
class ParsedProfiles {
 public:
  // Keeps the profiles of entries (parsing those not held yet) and drops
  // the rest. A profile that does not parse is left out: whoever needs it
  // parses it again and reports the error.
  void keep(const std::vector<PoolEntry>& entries);
  // The profile parsed from yaml (named name), or nullptr.
  std::shared_ptr<const Profile> find(const std::string& name, const std::string& yaml) const;
  // find, else a parse of yaml (throws ProfileError when it does not parse).
  std::shared_ptr<const Profile> get(const std::string& name, const std::string& yaml) const;
  size_t size() const { return parsed_.size(); }

 private:
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const Profile>> parsed_;  // (name, yaml)
};

// Counters kept by the spawner in memory shared with the server (one
// MAP_SHARED page), read for /metrics.
struct PoolStats {
  std::atomic<uint64_t> idle{0};               // sandboxes ready and waiting
  std::atomic<uint64_t> starting{0};           // being started
  std::atomic<uint64_t> idle_memory_bytes{0};  // what the idle ones hold
  std::atomic<uint64_t> fork_servers{0};       // fork servers serving
  std::atomic<uint64_t> hits{0};               // jobs given a warm sandbox ready and waiting
  std::atomic<uint64_t> waits{0};              // jobs given one still starting (none was ready)
  std::atomic<uint64_t> misses{0};             // jobs of a pooled key that found none ready or starting
  std::atomic<uint64_t> refills{0};            // warm sandboxes that became ready
  std::atomic<uint64_t> refill_ms_total{0};    // their start-up times, summed
  std::atomic<uint64_t> retired{0};            // idle sandboxes dropped (reload, shutdown)
};

// The message a pool worker sends when its sandbox is ready: 'R' and the
// memory its sandbox holds (bytes, native endian).
struct PoolReady {
  char tag = 'R';
  uint64_t memory_bytes = 0;
};

class WarmPool {
 public:
  // Runs in a forked child: holds one warm sandbox for entry, talks to the
  // spawner on ctl; never returns. fork_server: where to ask for the
  // sandbox (the key's fork server), or -1 to start it from nothing.
  using WorkerMain = std::function<void(const PoolEntry& entry, int ctl, int fork_server)>;
  // Runs in a forked child: keeps the key's fork server, whose requests
  // arrive on fork_server_end, until ctl closes (then waits for the runs it
  // forked to end, up to their wall time) or the fork server dies.
  using KeeperMain = std::function<void(const PoolEntry& entry, int ctl, int fork_server_end)>;

  // What the pool reads the time from: the steady clock, or a test's own,
  // which makes its delays and back-offs exact to check.
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  WarmPool(PoolStats* stats, WorkerMain worker_main, KeeperMain keeper_main = {},
           std::chrono::milliseconds refill_delay = kRefillDelay, Now now = std::chrono::steady_clock::now)
      : stats_(stats),
        worker_main_(std::move(worker_main)),
        keeper_main_(std::move(keeper_main)),
        refill_delay_(refill_delay),
        now_(std::move(now)) {}
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Replaces what is kept warm; sandboxes of keys no longer wanted (or beyond
  // a smaller size) are retired.
  void configure(std::vector<PoolEntry> entries, uint64_t memory_budget);
  bool pooled(const std::string& key) const;
  // The request socket of key's fork server, or -1 when it has none or it
  // does not serve yet (its runs then start cold).
  int fork_server_for(const std::string& key) const;

  // The fds to watch (one per pool worker) and what to do when they fire.
  void add_pollfds(std::vector<pollfd>& fds) const;
  void on_events(const std::vector<pollfd>& fds);

  // Hands job_fd to a ready sandbox of key, else to the one of key that
  // has been starting longest (its worker raises its CPU weight, and serves
  // the job once ready, or in a sandbox of its own if that one fails);
  // returns the pid of the worker that took it, or 0 when there is none
  // (the caller starts a cold one). Counts hits, waits and misses of
  // pooled keys.
  pid_t take(const std::string& key, int job_fd);

  // Starts pool workers until every key has its size (within the memory
  // budget); their pids go to children, for reaping.
  void refill(std::vector<pid_t>& children);

  // A pool worker ended (reaped by the spawner).
  void forget(pid_t pid);

  // How long until a key held back (after failures, or a take's refill
  // delay) may start again (the spawner's poll timeout), or nullopt when
  // none is held back.
  std::optional<std::chrono::milliseconds> next_retry() const;

  // Retires every idle sandbox (the spawner is shutting down).
  void retire_all();

  // In a forked child: closes the pool's fds, which belong to the spawner.
  void close_in_child();

 private:
  struct Worker {
    pid_t pid = -1;
    UniqueFd ctl;
    std::chrono::steady_clock::time_point started;
    bool ready = false;
    uint64_t memory_bytes = 0;
  };
  struct Key {
    PoolEntry entry;
    std::vector<Worker> workers;                      // starting or ready
    Worker keeper;                                    // entry.fork_server: the fork server's keeper (pid -1: none)
    UniqueFd fork_server;                             // where the key's workers send their fork requests
    uint32_t failures = 0;                            // starts in a row that ended before being ready
    std::chrono::steady_clock::time_point retry_at;   // no start before (after failures)
    std::chrono::steady_clock::time_point refill_at;  // no start before (after a take)
    bool tree_moved = false;                          // said once: the rootfs no longer names entry's tree
    // The last refill() passed this key over until a time (retry_at,
    // refill_at, or a start that could not be made): next_retry() wakes the
    // spawner for it even when that time has passed since.
    bool held_back = false;
  };

  void note_failure(Key& k);
  // A start that could not be made (errno says why): logged, backed off.
  void could_not_start(Key& k, const char* what);
  bool tree_still_named(Key& k);

  void retire(Worker& w);
  // Starts the key's fork server keeper; false when it could not.
  bool start_keeper(Key& k, std::vector<pid_t>& children);
  void update_gauges();

  PoolStats* stats_;
  WorkerMain worker_main_;
  KeeperMain keeper_main_;
  std::chrono::milliseconds refill_delay_;
  Now now_;
  std::map<std::string, Key> keys_;
  std::vector<Worker> retiring_;  // keys dropped while their workers start
  uint64_t memory_budget_ = 0;
};

}  // namespace nsbox
