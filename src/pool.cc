#include "nsbox/pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "nsbox/digest.h"
#include "nsbox/error.h"
#include "nsbox/fd_passing.h"
#include "nsbox/fork_server.h"
#include "nsbox/io.h"
#include "nsbox/profile_loader.h"

namespace nsbox {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string pool_key(const std::string& profile_yaml, Language language, const std::string& rootfs_tree) {
  const std::string text = profile_yaml + "\n" + to_string(language) + "\n" + rootfs_tree;
  return sha256_hex(text);
}

std::string current_rootfs_tree(const std::string& rootfs) { return resolved_or_as_is(rootfs); }

json to_json(const std::vector<PoolEntry>& entries, uint64_t memory_budget) {
  json j;
  j["memory_budget"] = memory_budget;
  j["entries"] = json::array();
  for (const auto& e : entries) {
    j["entries"].push_back({{"key", e.key},
                            {"profile_name", e.profile_name},
                            {"profile_yaml", e.profile_yaml},
                            {"language", to_string(e.language)},
                            {"size", e.size},
                            {"fork_server", e.fork_server},
                            {"rootfs", e.rootfs},
                            {"rootfs_tree", e.rootfs_tree}});
  }
  return j;
}

std::vector<PoolEntry> pool_entries_from_json(const json& j, uint64_t& memory_budget) {
  memory_budget = j.at("memory_budget").get<uint64_t>();
  std::vector<PoolEntry> out;
  for (const auto& e : j.at("entries")) {
    PoolEntry entry;
    entry.key = e.at("key").get<std::string>();
    entry.profile_name = e.at("profile_name").get<std::string>();
    entry.profile_yaml = e.at("profile_yaml").get<std::string>();
    auto language = parse_language(e.at("language").get<std::string>());
    if (!language) throw UsageError("pool entry: unknown language");
    entry.language = *language;
    entry.size = e.at("size").get<uint32_t>();
    entry.fork_server = e.value("fork_server", false);
    entry.rootfs = e.value("rootfs", "");
    entry.rootfs_tree = e.value("rootfs_tree", "");
    out.push_back(std::move(entry));
  }
  return out;
}

void ParsedProfiles::keep(const std::vector<PoolEntry>& entries) {
  decltype(parsed_) next;
  for (const auto& e : entries) {
    auto id = std::make_pair(e.profile_name, e.profile_yaml);
    if (next.count(id)) continue;
    if (auto it = parsed_.find(id); it != parsed_.end()) {
      next.emplace(id, it->second);
      continue;
    }
    try {
      next.emplace(id, std::make_shared<const Profile>(load_profile_text(e.profile_yaml, e.profile_name, {})));
    } catch (const std::exception&) {
      // Not kept: the worker that needs it parses it and reports why it fails.
    }
  }
  parsed_.swap(next);
}

std::shared_ptr<const Profile> ParsedProfiles::find(const std::string& name, const std::string& yaml) const {
  auto it = parsed_.find(std::make_pair(name, yaml));
  return it == parsed_.end() ? nullptr : it->second;
}

std::shared_ptr<const Profile> ParsedProfiles::get(const std::string& name, const std::string& yaml) const {
  if (auto found = find(name, yaml)) return found;
  return std::make_shared<const Profile>(load_profile_text(yaml, name, {}));
}

void WarmPool::configure(std::vector<PoolEntry> entries, uint64_t memory_budget) {
  memory_budget_ = memory_budget;
  std::map<std::string, Key> next;
  for (auto& e : entries) {
    if (e.size == 0) continue;
    Key& k = next[e.key];
    k.entry = std::move(e);
  }
  for (auto& [key, k] : keys_) {
    auto it = next.find(key);
    if (it != next.end() && it->second.entry.fork_server) {
      it->second.keeper = std::move(k.keeper);
      it->second.fork_server = std::move(k.fork_server);
    } else if (k.keeper.pid > 0) {
      k.keeper.ready = false;  // not a warm sandbox: not counted as retired
      retire(k.keeper);
    }
    for (auto& w : k.workers) {
      // Kept while the new config still wants this many of the same key.
      if (it != next.end() && it->second.workers.size() < it->second.entry.size) {
        it->second.workers.push_back(std::move(w));
      } else {
        retire(w);
      }
    }
  }
  keys_ = std::move(next);
  update_gauges();
}

bool WarmPool::pooled(const std::string& key) const { return keys_.count(key) > 0; }

int WarmPool::fork_server_for(const std::string& key) const {
  auto it = keys_.find(key);
  // Not before it serves: a fork asked of a zygote still starting would
  // wait out its start-up within the fork's step timeout.
  return it != keys_.end() && it->second.fork_server && it->second.keeper.ready ? it->second.fork_server.get() : -1;
}

void WarmPool::retire(Worker& w) {
  // Closing its control socket tells the worker to tear its sandbox down
  // (it also does when it is still starting, as soon as it is ready).
  if (w.ready) stats_->retired.fetch_add(1);
  w.ctl.reset();
  retiring_.push_back(std::move(w));
}

void WarmPool::add_pollfds(std::vector<pollfd>& fds) const {
  // Starting workers say when they are ready; ready ones only ever close
  // (their sandbox died while waiting).
  for (const auto& [key, k] : keys_) {
    for (const auto& w : k.workers) fds.push_back({w.ctl.get(), POLLIN, 0});
    if (k.keeper.ctl) fds.push_back({k.keeper.ctl.get(), POLLIN, 0});
  }
}

void WarmPool::on_events(const std::vector<pollfd>& fds) {
  for (const auto& p : fds) {
    if (!p.revents) continue;
    for (auto& [key, k] : keys_) {
      if (k.keeper.ctl && k.keeper.ctl.get() == p.fd) {
        PoolReady ready;
        ssize_t n = ::recv(p.fd, &ready, sizeof ready, MSG_DONTWAIT);
        if (n == static_cast<ssize_t>(sizeof ready) && ready.tag == 'R') {
          // failures is not reset here: a zygote that serves and dies at
          // its first fork still backs off; a warm sandbox it forked resets it.
          k.keeper.ready = true;
          k.keeper.memory_bytes = ready.memory_bytes;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          k.keeper.ready = false;  // serves no more
          k.keeper.ctl.reset();    // it is ending; reaped by the spawner, restarted by refill
          k.fork_server.reset();
          note_failure(k);
        }
        break;
      }
      for (auto it = k.workers.begin(); it != k.workers.end(); ++it) {
        if (it->ctl.get() != p.fd) continue;
        PoolReady ready;
        ssize_t n = ::recv(it->ctl.get(), &ready, sizeof ready, MSG_DONTWAIT);
        if (n == static_cast<ssize_t>(sizeof ready) && ready.tag == 'R' && !it->ready) {
          it->ready = true;
          k.failures = 0;
          it->memory_bytes = ready.memory_bytes;
          stats_->refills.fetch_add(1);
          stats_->refill_ms_total.fetch_add(static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::milliseconds>(now_() - it->started).count()));
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          // The worker is gone (its sandbox failed or died): it is reaped
          // by the spawner, and replaced by the next refill.
          if (!it->ready) note_failure(k);
          k.workers.erase(it);
        }
        break;
      }
    }
  }
  update_gauges();
}

pid_t WarmPool::take(const std::string& key, int job_fd) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return 0;
  auto& workers = it->second.workers;
  // A ready one, else the one furthest into its start-up: a request that
  // waits for the rest of it costs one interpreter start, where a cold one
  // started beside it would cost two (the CPUs are the bound under load).
  auto best = [&] {
    return std::min_element(workers.begin(), workers.end(), [](const Worker& a, const Worker& b) {
      return a.ready != b.ready ? a.ready : a.started < b.started;
    });
  };
  for (auto w = best(); w != workers.end(); w = best()) {
    // The worker reads the job from job_fd and answers on it; its control
    // socket closes with it. A starting one finds it queued, and hurries.
    if (send_fd(w->ctl.get(), job_fd, 'J') != 0) {
      workers.erase(w);  // it died just now: try the next
      continue;
    }
    // Only a take from a full key holds its refill back: with one missing
    // already, a refill is pending or under way, and must not be pushed.
    const bool was_full = workers.size() >= it->second.entry.size;
    (w->ready ? stats_->hits : stats_->waits).fetch_add(1);
    const pid_t taker = w->pid;
    workers.erase(w);
    if (was_full) it->second.refill_at = now_() + refill_delay_;
    update_gauges();
    return taker;
  }
  stats_->misses.fetch_add(1);
  return 0;
}

void WarmPool::could_not_start(Key& k, const char* what) {
  const int err = errno;
  spdlog::warn("pool of profile {} ({}): could not make {}: {}; tried again after a back-off", k.entry.profile_name,
               to_string(k.entry.language), what, std::strerror(err));
  note_failure(k);
  k.held_back = true;  // next_retry() wakes the spawner for it
}

void WarmPool::note_failure(Key& k) {
  // A sandbox that cannot start (a broken profile, a missing rootfs, a host
  // that refuses a namespace) would otherwise be retried in a busy loop.
  ++k.failures;
  const auto delay = kFirstRetryDelay * (1 << std::min<uint32_t>(k.failures - 1, 10));
  k.retry_at = now_() + std::min<Clock::duration>(delay, kMaxRetryDelay);
}

std::optional<std::chrono::milliseconds> WarmPool::next_retry() const {
  std::optional<std::chrono::milliseconds> soonest;
  const auto now = now_();
  for (const auto& [key, k] : keys_) {
    // Only a key the last refill() held back: one short for another reason
    // (its fork server starting, kMaxStartingPerKey, the memory budget)
    // waits for an event on the pool's fds or a reaped child.
    if (k.workers.size() >= k.entry.size || !k.held_back) continue;
    const auto at = std::max(k.failures > 0 ? k.retry_at : Clock::time_point{}, k.refill_at);
    // Due already (the spawner came back later than that): at once, not
    // never; refill() then clears held_back or starts what it can.
    const auto left =
        at <= now ? std::chrono::milliseconds(0)
                  : std::chrono::duration_cast<std::chrono::milliseconds>(at - now) + std::chrono::milliseconds(1);
    if (!soonest || left < *soonest) soonest = left;
  }
  return soonest;
}

// Whether the key's rootfs still names the tree its sandboxes are built
// on. When tools/build-rootfs has moved it, runs are routed by the new
// tree's key (cold until a reload re-keys the pool): this key's sandboxes
// would never serve, so none is started (looked at again each second: a
// rollback makes them serve again), and the log says so once.
bool WarmPool::tree_still_named(Key& k) {
  if (k.entry.rootfs.empty() || current_rootfs_tree(k.entry.rootfs) == k.entry.rootfs_tree) {
    k.tree_moved = false;
    return true;
  }
  k.refill_at = std::max(k.refill_at, now_() + std::chrono::seconds(1));
  if (!k.tree_moved)
    spdlog::warn(
        "pool of profile {} ({}): rootfs {} no longer resolves to {}: its runs start cold on the new tree "
        "until the node reloads (SIGHUP)",
        k.entry.profile_name, to_string(k.entry.language), k.entry.rootfs, k.entry.rootfs_tree);
  k.tree_moved = true;
  return false;
}

void WarmPool::refill(std::vector<pid_t>& children) {
  for (auto& [key, k] : keys_) {
    const auto now = now_();
    k.held_back = (k.failures > 0 && now < k.retry_at) || now < k.refill_at || !tree_still_named(k);
    if (k.held_back) continue;
    while (k.workers.size() < k.entry.size) {
      // A few start at a time: a large pool refilling all at once would
      // queue the runs being served behind its start-ups (on the fork
      // server's socket, and on the kernel's cgroup lock on v1).
      const auto starting = std::count_if(k.workers.begin(), k.workers.end(), [](const Worker& w) { return !w.ready; });
      if (starting >= static_cast<std::ptrdiff_t>(kMaxStartingPerKey)) break;
      uint64_t held = 0, known = 0, count = 0;
      for (const auto& [_, other] : keys_) {
        held += other.keeper.memory_bytes;  // the fork server counts against the budget too
        for (const auto& w : other.workers) {
          held += w.memory_bytes;
          if (&other == &k && w.ready) {
            known += w.memory_bytes;
            ++count;
          }
        }
      }
      // Start another only if one more of this key's typical size fits.
      const uint64_t expected = count ? known / count : 0;
      if (memory_budget_ && held + expected > memory_budget_) break;
      if (k.entry.fork_server && !k.fork_server && !start_keeper(k, children)) {
        // Still ending (its reaping wakes the spawner), or it could not be
        // forked: then tried again after the back-off, not never.
        if (keeper_main_ && k.keeper.pid <= 0) could_not_start(k, "its fork server's keeper");
        break;
      }
      if (k.entry.fork_server && !k.keeper.ready) break;  // its sandboxes are forked once it serves
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        could_not_start(k, "a pool worker's control socket");
        break;
      }
      UniqueFd mine(sv[0]), theirs(sv[1]);
      pid_t pid = ::fork();
      if (pid < 0) {
        could_not_start(k, "a pool worker");
        break;
      }
      if (pid == 0) {
        mine.reset();
        UniqueFd fork_server(k.fork_server ? ::fcntl(k.fork_server.get(), F_DUPFD_CLOEXEC, 0) : -1);
        close_in_child();
        worker_main_(k.entry, theirs.get(), fork_server.get());
        ::_exit(0);
      }
      children.push_back(pid);
      Worker w;
      w.pid = pid;
      w.ctl = std::move(mine);
      w.started = now_();
      k.workers.push_back(std::move(w));
    }
  }
  update_gauges();
}

bool WarmPool::start_keeper(Key& k, std::vector<pid_t>& children) {
  if (!keeper_main_ || k.keeper.pid > 0) return false;  // none, or the last one is still ending
  int ctl[2], requests[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) return false;
  UniqueFd ctl_mine(ctl[0]), ctl_theirs(ctl[1]);
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, requests) != 0) return false;
  UniqueFd requests_mine(requests[0]), requests_theirs(requests[1]);
  make_room_for_a_fork_request(requests_mine.get());
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ctl_mine.reset();
    requests_mine.reset();
    close_in_child();
    keeper_main_(k.entry, ctl_theirs.get(), requests_theirs.get());
    ::_exit(0);
  }
  children.push_back(pid);
  k.keeper = Worker{};
  k.keeper.pid = pid;
  k.keeper.ctl = std::move(ctl_mine);
  k.keeper.started = now_();
  // Handed to workers only once the keeper says its fork server serves.
  k.fork_server = std::move(requests_mine);
  return true;
}

void WarmPool::forget(pid_t pid) {
  for (auto& [key, k] : keys_) {
    if (k.keeper.pid == pid) {
      if (k.keeper.ctl) note_failure(k);  // it ended before its control socket said so
      k.keeper = Worker{};
      k.fork_server.reset();
    }
    for (const auto& w : k.workers)
      if (w.pid == pid && !w.ready) note_failure(k);
  }
  for (auto& [key, k] : keys_)
    k.workers.erase(std::remove_if(k.workers.begin(), k.workers.end(), [&](const Worker& w) { return w.pid == pid; }),
                    k.workers.end());
  retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(), [&](const Worker& w) { return w.pid == pid; }),
                  retiring_.end());
  update_gauges();
}

void WarmPool::retire_all() {
  for (auto& [key, k] : keys_) {
    for (auto& w : k.workers) retire(w);
    if (k.keeper.pid > 0) {
      k.keeper.ready = false;
      retire(k.keeper);
    }
    k.fork_server.reset();
  }
  keys_.clear();
  update_gauges();
}

void WarmPool::close_in_child() {
  for (auto& [key, k] : keys_) {
    for (auto& w : k.workers) w.ctl.reset();
    k.keeper.ctl.reset();
    k.fork_server.reset();
  }
  for (auto& w : retiring_) w.ctl.reset();
}

void WarmPool::update_gauges() {
  uint64_t idle = 0, starting = 0, memory = 0, fork_servers = 0;
  for (const auto& [key, k] : keys_) {
    fork_servers += k.keeper.ready;
    for (const auto& w : k.workers) {
      (w.ready ? idle : starting)++;
      if (w.ready) memory += w.memory_bytes;
    }
  }
  stats_->idle = idle;
  stats_->starting = starting;
  stats_->idle_memory_bytes = memory;
  stats_->fork_servers = fork_servers;
}

}  // namespace nsbox
