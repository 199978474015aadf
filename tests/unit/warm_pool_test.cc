// WarmPool's bookkeeping with stand-in pool workers (forked children that
// only say ready): no sandbox, no privileges. Its delays and back-offs run
// on a clock the tests move by hand, so they are checked to the millisecond
// however loaded the machine is.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "nsbox/fd_passing.h"
#include "nsbox/pool.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

using std::chrono::milliseconds;

// Says ready, then waits for a job or for the pool to hang up.
void stand_in_worker(const PoolEntry&, int ctl, int) {
  PoolReady ready;
  ready.memory_bytes = 4096;
  if (::send(ctl, &ready, sizeof ready, MSG_NOSIGNAL) != sizeof ready) ::_exit(1);
  char tag;
  (void)::read(ctl, &tag, 1);
  ::_exit(0);
}

// The time as the pool sees it; moves only when the test says.
struct ManualClock {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  WarmPool::Now reader() {
    return [this] { return at; };
  }
};

// next_retry() rounds what is left up by 1 ms, so that the spawner never
// wakes just before a key is due.
milliseconds wake_after(milliseconds left) { return left + milliseconds(1); }

class WarmPoolTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (pid_t pid : children_) ::waitpid(pid, nullptr, 0);
  }

  // Runs the spawner's loop body (without refills) until done() holds, at
  // most 10 s; false when it never did.
  template <typename Done>
  bool pump_until(WarmPool& pool, Done done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::vector<pollfd> fds;
      pool.add_pollfds(fds);
      ::poll(fds.data(), fds.size(), 20);
      pool.on_events(fds);
    }
    return true;
  }

  // Until key has `idle` ready sandboxes.
  void wait_until_idle(WarmPool& pool, PoolStats& stats, uint64_t idle) {
    ASSERT_TRUE(pump_until(pool, [&] { return stats.idle.load() >= idle; })) << "the stand-in workers never said ready";
  }

  PoolEntry entry(uint32_t size) {
    PoolEntry e;
    e.key = "key";
    e.profile_name = "test";
    e.profile_yaml = "name: test\n";
    e.size = size;
    return e;
  }

  std::vector<pid_t> children_;
};

TEST_F(WarmPoolTest, ATakesReplacementStartsOnlyAfterTheRefillDelay) {
  PoolStats stats;
  ManualClock clock;
  const milliseconds delay(400);
  WarmPool pool(&stats, stand_in_worker, {}, delay, clock.reader());
  pool.configure({entry(3)}, 0);
  EXPECT_FALSE(pool.next_retry()) << "nothing is held back before any take";
  pool.refill(children_);  // two start at once (kMaxStartingPerKey), then the third
  wait_until_idle(pool, stats, 2);
  pool.refill(children_);
  wait_until_idle(pool, stats, 3);
  ASSERT_EQ(children_.size(), 3u);

  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd job(sv[0]), worker_end(sv[1]);
  ASSERT_TRUE(pool.take("key", job.get()));

  std::vector<pid_t> started;
  pool.refill(started);
  EXPECT_TRUE(started.empty()) << "the replacement started at once";
  auto wait = pool.next_retry();
  ASSERT_TRUE(wait) << "the spawner would not wake up for the held-back refill";
  EXPECT_EQ(*wait, wake_after(delay));

  // A take while the refill is pending does not push it further: a steady
  // stream of takes still refills.
  clock.at += delay / 2;
  ASSERT_TRUE(pool.take("key", job.get()));
  pool.refill(started);
  EXPECT_TRUE(started.empty());
  wait = pool.next_retry();
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, wake_after(delay / 2)) << "the second take moved the refill";

  // Held back until the very end of the delay.
  clock.at += delay / 2 - milliseconds(1);
  pool.refill(started);
  EXPECT_TRUE(started.empty()) << "the replacements started before the delay was over";
  wait = pool.next_retry();
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, wake_after(milliseconds(1)));

  // Nor does a take that comes once the delay is over, before refill() ran.
  clock.at += milliseconds(1);
  ASSERT_TRUE(pool.take("key", job.get()));
  EXPECT_EQ(stats.hits.load(), 3u);
  pool.refill(started);
  EXPECT_EQ(started.size(), 2u) << "the replacements did not start once the delay was over";
  children_.insert(children_.end(), started.begin(), started.end());
  pool.retire_all();
}

// What a worker wrote on a job socket (our end of it) until it closed,
// waiting at most 10 s.
std::string answer_on(int fd) {
  std::string out;
  char buf[64];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 10000) > 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A take goes to a ready sandbox first; with none ready, to one still
// starting, whose worker finds the job queued once it is ready (the pool no
// longer listens to it); only with neither is it a miss.
TEST_F(WarmPoolTest, ATakeWithNoneReadyGoesToOneStillStarting) {
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  UniqueFd go_read(go[0]), go_write(go[1]);
  // Starts up when the test writes a byte on go (each byte lets one go).
  auto gated_worker = [&](const PoolEntry&, int ctl, int) {
    go_write.reset();  // a failed test's end closes it: never stuck here
    char c;
    if (::read(go_read.get(), &c, 1) != 1) ::_exit(1);
    PoolReady ready;
    // Fails when the pool has given this one a job while it started.
    (void)::send(ctl, &ready, sizeof ready, MSG_NOSIGNAL);
    char tag = 0;
    UniqueFd job(receive_fd(ctl, &tag));
    if (!job || tag != 'J') ::_exit(0);  // retired
    (void)::write(job.get(), "served", 6);
    ::_exit(0);
  };
  PoolStats stats;
  WarmPool pool(&stats, gated_worker, {}, milliseconds(0));
  pool.configure({entry(2)}, 0);
  pool.refill(children_);
  ASSERT_EQ(children_.size(), 2u);
  ASSERT_EQ(::write(go_write.get(), "g", 1), 1);
  wait_until_idle(pool, stats, 1);
  EXPECT_EQ(stats.starting.load(), 1u);

  UniqueFd ours[3], theirs[3];
  for (int i = 0; i < 3; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ours[i].reset(sv[0]);
    theirs[i].reset(sv[1]);
  }
  ASSERT_TRUE(pool.take("key", theirs[0].get()));
  EXPECT_EQ(stats.hits.load(), 1u) << "the ready one goes first";
  ASSERT_TRUE(pool.take("key", theirs[1].get()));
  EXPECT_EQ(stats.waits.load(), 1u) << "with none ready, the request waits for the one starting";
  EXPECT_EQ(stats.starting.load(), 0u) << "a sandbox given to a request is no longer the pool's";
  EXPECT_FALSE(pool.take("key", theirs[2].get()));
  EXPECT_EQ(stats.misses.load(), 1u);
  for (auto& fd : theirs) fd.reset();

  EXPECT_EQ(answer_on(ours[0].get()), "served");
  ASSERT_EQ(::write(go_write.get(), "g", 1), 1);  // the second one is ready now
  EXPECT_EQ(answer_on(ours[1].get()), "served") << "the job given while it started was lost";
  EXPECT_EQ(answer_on(ours[2].get()), "") << "a miss is the caller's to run";
  go_write.reset();
}

// A fork server is asked for no fork before it serves: while its zygote
// starts, the key starts no warm sandbox and a run finds no fork server (it
// starts cold), so that no fork's step timeout counts the zygote's start-up.
TEST_F(WarmPoolTest, AForkServersSandboxesStartOnlyOnceItServes) {
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  UniqueFd go_read(go[0]), go_write(go[1]);
  // Says ready when the test writes on go, then waits to be retired.
  auto stand_in_keeper = [&](const PoolEntry&, int ctl, int) {
    go_write.reset();  // a failed test's end closes it: never stuck here
    char c;
    if (::read(go_read.get(), &c, 1) != 1) ::_exit(1);
    PoolReady ready;
    ready.memory_bytes = 8192;
    if (::send(ctl, &ready, sizeof ready, MSG_NOSIGNAL) != sizeof ready) ::_exit(1);
    (void)::read(ctl, &c, 1);
    ::_exit(0);
  };
  PoolStats stats;
  WarmPool pool(&stats, stand_in_worker, stand_in_keeper, milliseconds(0));
  PoolEntry forked = entry(2);
  forked.fork_server = true;
  pool.configure({forked}, 0);

  pool.refill(children_);
  ASSERT_EQ(children_.size(), 1u) << "a warm sandbox was started before its fork server served";
  pump_until(
      pool, [] { return false; }, milliseconds(200));
  pool.refill(children_);
  EXPECT_EQ(children_.size(), 1u) << "a warm sandbox was started before its fork server served";
  EXPECT_EQ(pool.fork_server_for("key"), -1) << "a run would ask a fork server that does not serve yet";
  EXPECT_EQ(stats.fork_servers.load(), 0u);

  ASSERT_EQ(::write(go_write.get(), "g", 1), 1);
  ASSERT_TRUE(pump_until(pool, [&] { return stats.fork_servers.load() == 1; })) << "the keeper's ready was not seen";
  EXPECT_GE(pool.fork_server_for("key"), 0);
  pool.refill(children_);
  EXPECT_EQ(children_.size(), 3u) << "the warm sandboxes did not start once the fork server served";
  wait_until_idle(pool, stats, 2);
  pool.retire_all();
  EXPECT_EQ(stats.fork_servers.load(), 0u);
}

// Lost refill wake-ups: each of these left next_retry() with nothing, and
// the spawner's poll(-1) then waited for an unrelated event with the key
// short (a CI run once saw a pool not refill in 60 s).

// Dies before it is ready: a failed start, as a fork step's timeout makes.
void dies_starting(const PoolEntry&, int, int) { ::_exit(3); }

TEST_F(WarmPoolTest, ATakesRefillIsNotLostWhenTheSpawnerComesBackAfterTheDelay) {
  PoolStats stats;
  ManualClock clock;
  const milliseconds delay(300);
  WarmPool pool(&stats, stand_in_worker, {}, delay, clock.reader());
  pool.configure({entry(1)}, 0);
  pool.refill(children_);
  wait_until_idle(pool, stats, 1);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd job(sv[0]), worker_end(sv[1]);
  ASSERT_TRUE(pool.take("key", job.get()));
  std::vector<pid_t> started;
  pool.refill(started);  // the end of the spawner's iteration: held back
  EXPECT_TRUE(started.empty());
  // The spawner is preempted before its loop top looks at next_retry()
  // (2 CPUs, ctest -j2): the delay is over by then.
  clock.at += delay + milliseconds(10);
  const auto wait = pool.next_retry();
  ASSERT_TRUE(wait) << "the spawner would sleep in poll(-1) with the key short";
  EXPECT_EQ(*wait, milliseconds(0));
  pool.refill(started);
  EXPECT_EQ(started.size(), 1u);
  children_.insert(children_.end(), started.begin(), started.end());
  pool.retire_all();
}

// A start that fails is retried after kFirstRetryDelay, then after twice
// that, and so on; a back-off that is over before the spawner looks at
// next_retry() still wakes it at once.
TEST_F(WarmPoolTest, AFailedStartIsRetriedAfterABackOffThatDoubles) {
  PoolStats stats;
  ManualClock clock;
  WarmPool pool(&stats, dies_starting, {}, kRefillDelay, clock.reader());
  pool.configure({entry(1)}, 0);
  std::vector<pid_t> started;
  for (int failures = 1; failures <= 3; ++failures) {
    pool.refill(started);
    ASSERT_EQ(started.size(), static_cast<size_t>(failures)) << "no start after " << failures - 1 << " failures";
    // Its control socket hangs up: note_failure, a back-off.
    ASSERT_TRUE(pump_until(pool, [&] { return stats.starting.load() == 0; }));
    const milliseconds back_off = kFirstRetryDelay * (1 << (failures - 1));
    pool.refill(started);
    EXPECT_EQ(started.size(), static_cast<size_t>(failures)) << "retried at once after failure " << failures;
    auto wait = pool.next_retry();
    ASSERT_TRUE(wait) << "the spawner would never retry the failed start";
    EXPECT_EQ(*wait, wake_after(back_off)) << "after failure " << failures;
    clock.at += back_off - milliseconds(1);
    pool.refill(started);
    EXPECT_EQ(started.size(), static_cast<size_t>(failures)) << "retried before the back-off was over";
    clock.at += milliseconds(50);
    wait = pool.next_retry();
    ASSERT_TRUE(wait) << "a back-off over before the spawner looked would never wake it";
    EXPECT_EQ(*wait, milliseconds(0));
  }
  children_.insert(children_.end(), started.begin(), started.end());
  pool.retire_all();
}

// A start that cannot even be made (fork or socketpair fails: EAGAIN under a
// pids limit, EMFILE) is retried after a back-off: refill() used to return
// with no wake-up arranged, and the key stayed short for good, silently.
// Here fork fails: RLIMIT_NPROC 0, for a user it binds (not root). (Taking
// every fd instead left the sanitizers, which check memory through a pipe,
// none.)
TEST_F(WarmPoolTest, AStartThatCannotBeMadeIsRetried) {
  const pid_t child = ::fork();  // the lowered RLIMIT_NPROC stays in there
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                             ::setresuid(65534, 65534, 65534) != 0))
      ::_exit(9);
    PoolStats stats;
    ManualClock clock;
    WarmPool pool(&stats, stand_in_worker, {}, kRefillDelay, clock.reader());
    pool.configure({entry(1)}, 0);
    rlimit old{};
    ::getrlimit(RLIMIT_NPROC, &old);
    const rlimit none{0, old.rlim_max};
    if (::setrlimit(RLIMIT_NPROC, &none) != 0) ::_exit(10);
    std::vector<pid_t> started;
    pool.refill(started);
    if (!started.empty()) ::_exit(11);
    if (pool.next_retry() != wake_after(kFirstRetryDelay)) ::_exit(12);  // or it would sleep until an unrelated event
    ::setrlimit(RLIMIT_NPROC, &old);
    clock.at += kFirstRetryDelay - milliseconds(1);
    pool.refill(started);
    if (!started.empty()) ::_exit(14);
    clock.at += milliseconds(1);
    pool.refill(started);
    if (started.size() != 1) ::_exit(13);
    pool.retire_all();
    ::waitpid(started[0], nullptr, 0);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "9: setresuid, 10: setrlimit, 11: started anyway, 12: no wake-up after kFirstRetryDelay, 13: not retried, "
         "14: retried before the back-off was over";
}

}  // namespace
}  // namespace nsbox
