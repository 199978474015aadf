// The floor of a fork-server run on this host (issue #8, item 2): what the
// kernel alone charges for one run when a preloaded zygote forks it into
// fresh namespaces and a fresh cgroup, before any interpreter, HTTP or JSON
// work. If this floor is above a throughput target, no fork server reaches
// that target here.
//
// Each lane is a supervisor (host root) and a zygote it started in a user
// and mount namespace of its own, holding --heap-mb of touched memory (the
// preloaded runtime). Per run the supervisor asks the zygote to fork C; C
// enters the variant's namespaces and reports its pid; the supervisor moves
// it into a new run cgroup (nsbox's own cgroup code) and says go; C forks P,
// the run's PID 1, which mounts /proc and /tmp and forks W, the workload,
// which writes to --touch-kb of the inherited heap (copy-on-write faults, as
// a forked interpreter's refcounts do); all exit and the cgroup is removed.
// The variants build on each other and run in a new random order each round;
// besides latency and throughput it reports the machine's busy CPU time per run.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "nsbox/cgroup.h"
#include "nsbox/error.h"
#include "nsbox/io.h"
#include "nsbox/netns.h"
#include "nsbox/unique_fd.h"

namespace {

using Clock = std::chrono::steady_clock;

enum Variant : char { kFork, kNamespaces, kNetwork, kCgroup, kVariantCount };

constexpr std::array<const char*, kVariantCount> kVariantNames = {"fork", "+ mount, pid, ipc, uts ns",
                                                                  "+ net ns (lo up)", "+ run cgroup"};
constexpr std::array<const char*, kVariantCount> kVariantWork = {
    "zygote forks C, C forks PID 1, PID 1 forks the workload; all exit",
    "C unshares them; PID 1 mounts a fresh /proc and a tmpfs /tmp",
    "C also unshares a network namespace and brings lo up",
    "nsbox creates the run's cgroup, moves C into it, then kills and removes it"};

struct Options {
  int runs = 400;
  int lanes = 2;
  int rounds = 5;
  int heap_mb = 14;     // a python3 runner's resident set after its imports
  int touch_kb = 1400;  // what a trivial run's interpreter writes after fork (~350 pages)
};

[[noreturn]] void die(const std::string& step, const std::string& object, int err) {
  std::fprintf(stderr, "bench-fork-floor: %s\n", nsbox::format_sys_error(step, object, err).c_str());
  std::_Exit(1);
}

// Writes all of data or ends the process with the failing step (this runs
// in forked children too, where an exception has nowhere to go).
void put(int fd, const void* data, size_t size, const char* object) {
  try {
    nsbox::write_full(fd, std::string_view(static_cast<const char*>(data), size), "write", object);
  } catch (const nsbox::SysError& e) {
    std::fprintf(stderr, "bench-fork-floor: %s\n", e.what());
    std::_Exit(1);
  }
}

// Reads exactly size bytes; false at end of file.
bool get(int fd, void* data, size_t size) { return nsbox::read_full(fd, data, size) == size; }

void send_byte(int fd, char c) { put(fd, &c, 1, "lane socket"); }

char recv_byte(int fd) {
  char c = 0;
  if (!get(fd, &c, 1)) die("read", "lane socket", EPIPE);
  return c;
}

// PID 1 of the run: the mounts a sandbox's PID 1 makes, then the workload.
[[noreturn]] void run_pid1(Variant v, char* heap, size_t touch) {
  if (v >= kNamespaces) {
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) die("mount", "/proc", errno);
    if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m") != 0) die("mount", "/tmp", errno);
  }
  pid_t w = ::fork();
  if (w < 0) die("fork", "workload", errno);
  if (w == 0) {
    for (size_t i = 0; i < touch; i += 4096) heap[i]++;
    ::_exit(0);
  }
  ::waitpid(w, nullptr, 0);
  ::_exit(0);
}

// C: forked by the zygote for one run; talks to the supervisor on sock.
[[noreturn]] void run_forked(Variant v, int sock, char* heap, size_t touch) {
  int flags = 0;
  if (v >= kNamespaces) flags |= CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
  if (v >= kNetwork) flags |= CLONE_NEWNET;
  if (flags && ::unshare(flags) != 0) die("unshare", "run namespaces", errno);
  pid_t self = ::getpid();  // the zygote shares the host's pid namespace here
  send_byte(sock, 'p');
  put(sock, &self, sizeof self, "lane socket");
  if (recv_byte(sock) != 'g') die("read", "go byte", EPROTO);
  if (v >= kNetwork) {
    if (int err = nsbox::bring_up_loopback()) die("bring up", "lo", err);
  }
  pid_t p = ::fork();
  if (p < 0) die("fork", "PID 1", errno);
  if (p == 0) run_pid1(v, heap, touch);
  ::waitpid(p, nullptr, 0);
  ::_exit(0);
}

// The zygote: holds the preloaded heap, forks one run per request.
[[noreturn]] void run_zygote(int sock, const Options& o) {
  if (recv_byte(sock) != 'm') ::_exit(1);  // the supervisor wrote our id maps
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die("mount", "/ private", errno);
  const size_t heap_size = static_cast<size_t>(o.heap_mb) << 20;
  char* heap = static_cast<char*>(std::malloc(heap_size));
  if (!heap) die("malloc", "zygote heap", ENOMEM);
  std::memset(heap, 1, heap_size);
  const size_t touch = std::min(heap_size, static_cast<size_t>(o.touch_kb) << 10);
  for (;;) {
    char v = 0;
    if (!get(sock, &v, 1)) ::_exit(0);  // the supervisor is done
    pid_t c = ::fork();
    if (c < 0) die("fork", "run", errno);
    if (c == 0) run_forked(static_cast<Variant>(v), sock, heap, touch);
    // Done once C is reaped (it reaps PID 1, which reaps the workload): the
    // cgroup is empty when the supervisor removes it, as in nsbox.
    ::waitpid(c, nullptr, 0);
    send_byte(sock, 'd');
  }
}

void write_file(const std::string& path, const std::string& text) {
  nsbox::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) die("open", path, errno);
  put(fd.get(), text.data(), text.size(), path.c_str());
}

// Forks a child that runs child_main(its end of a new socket pair) and
// never returns; gives the parent's end in `sock` and the child's pid.
template <typename ChildMain>
pid_t fork_connected(const char* what, nsbox::UniqueFd& sock, ChildMain child_main) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) die("socketpair", what, errno);
  pid_t pid = ::fork();
  if (pid < 0) die("fork", what, errno);
  if (pid == 0) {
    ::close(pair[0]);
    child_main(pair[1]);
    ::_exit(0);
  }
  ::close(pair[1]);
  sock.reset(pair[0]);
  return pid;
}

// Starts a zygote in its own user and mount namespaces, mapped to the
// unprivileged host uid and gid 65534; returns the socket to it.
nsbox::UniqueFd start_zygote(const Options& o) {
  nsbox::UniqueFd sock;
  const pid_t z = fork_connected("zygote", sock, [&](int end) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) die("unshare", "zygote user namespace", errno);
    send_byte(end, 'u');
    run_zygote(end, o);
  });
  if (recv_byte(sock.get()) != 'u') die("read", "zygote start", EPROTO);
  const std::string child = "/proc/" + std::to_string(z);
  write_file(child + "/setgroups", "deny");
  write_file(child + "/uid_map", "0 65534 1");
  write_file(child + "/gid_map", "0 65534 1");
  send_byte(sock.get(), 'm');
  return sock;
}

// In a lane, failures throw: unwinding removes the run's cgroup.
char lane_recv(int fd, const char* what) {
  char c = 0;
  if (!get(fd, &c, 1)) throw nsbox::SysError("read", what, EPIPE);
  return c;
}

// One run of variant v; its latency in microseconds.
int64_t run_once(int zygote, Variant v, const nsbox::CgroupHost& host, const std::string& version) {
  static const nsbox::CgroupLimits limits{.memory_bytes = 512ull << 20, .pids = 128, .cpus = 1};
  const auto t0 = Clock::now();
  std::unique_ptr<nsbox::RunCgroup> cgroup;
  if (v >= kCgroup) cgroup = nsbox::create_run_cgroup(host, version, limits, nsbox::next_run_cgroup_name());
  nsbox::write_full(zygote, std::string_view(reinterpret_cast<const char*>(&v), 1), "write", "zygote");
  if (lane_recv(zygote, "zygote") != 'p') throw nsbox::SysError("run", "setup (see its error above)", EPROTO);
  pid_t pid = 0;
  if (!get(zygote, &pid, sizeof pid)) throw nsbox::SysError("read", "run pid", EPIPE);
  if (cgroup) cgroup->add_process(pid);
  nsbox::write_full(zygote, "g", "write", "zygote");
  if (lane_recv(zygote, "zygote") != 'd') throw nsbox::SysError("read", "run end", EPROTO);
  cgroup.reset();  // empty by now: removed
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// One lane: serves batches from the parent on ctl, answering each with the
// batch's per-run latencies in microseconds. Ctrl-C is the parent's: a lane
// sees its socket close and ends between runs, removing what it created.
[[noreturn]] void run_lane(int ctl, const Options& o, const nsbox::CgroupHost& host, const std::string& version) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
  try {
    nsbox::UniqueFd zygote = start_zygote(o);
    for (;;) {
      struct {
        char variant;
        int32_t count;
      } batch{};
      if (!get(ctl, &batch, sizeof batch)) ::_exit(0);
      std::vector<int64_t> us;
      for (int i = 0; i < batch.count; ++i)
        us.push_back(run_once(zygote.get(), static_cast<Variant>(batch.variant), host, version));
      nsbox::write_full(ctl, std::string_view(reinterpret_cast<const char*>(us.data()), us.size() * sizeof us[0]),
                        "write", "lane results");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-fork-floor: lane: %s\n", e.what());
    ::_exit(1);
  }
}

// Busy and total jiffies of all CPUs (/proc/stat's first line).
std::pair<uint64_t, uint64_t> cpu_jiffies() {
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (!f) die("open", "/proc/stat", errno);
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                            &v[6], &v[7]);
  std::fclose(f);
  if (n != 8) die("parse", "/proc/stat", EPROTO);
  uint64_t total = 0;
  for (auto x : v) total += x;
  return {total - v[3] - v[4], total};  // idle and iowait are not busy
}

double percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))]) / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Floor of a fork-server run on this host: fork + fresh namespaces + fresh cgroup, no "
      "interpreter"};
  app.add_option("--runs", o.runs, "runs per variant, over all lanes and rounds")->check(CLI::Range(10, 5000));
  app.add_option("--lanes", o.lanes, "runs in flight at once (default 2)")->check(CLI::Range(1, 16));
  app.add_option("--rounds", o.rounds, "rounds; the variants run in a new random order each round")
      ->check(CLI::Range(1, 50));
  app.add_option("--heap-mb", o.heap_mb, "zygote's touched memory, MiB (default 14)")->check(CLI::Range(1, 1024));
  app.add_option("--touch-kb", o.touch_kb, "memory each run writes after fork, KiB (default 1400)")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench-fork-floor: run as root (it writes id maps and creates cgroups)\n");
    return 1;
  }
  const auto host = nsbox::CgroupHost::detect();
  const std::string version = host.choose({"memory", "cpu", "pids"});
  if (version.empty()) {
    std::fprintf(stderr, "bench-fork-floor: no cgroup with memory, cpu and pids controllers on this host\n");
    return 1;
  }
  std::vector<nsbox::UniqueFd> lanes;
  std::vector<pid_t> lane_pids;
  for (int i = 0; i < o.lanes; ++i) {
    nsbox::UniqueFd sock;
    lane_pids.push_back(fork_connected("lane", sock, [&](int end) {
      lanes.clear();  // the other lanes' sockets are the parent's
      run_lane(end, o, host, version);
    }));
    lanes.push_back(std::move(sock));
  }
  const int per_batch = std::max(1, o.runs / (o.rounds * o.lanes));
  std::array<std::vector<int64_t>, kVariantCount> latencies;
  std::array<double, kVariantCount> seconds{};
  std::array<uint64_t, kVariantCount> busy_jiffies{};
  std::array<int, kVariantCount> done{};
  std::array<Variant, kVariantCount> order = {kFork, kNamespaces, kNetwork, kCgroup};
  std::mt19937 shuffle_rng(20261130);  // fixed: the same orders every time
  for (int round = 0; round < o.rounds; ++round) {
    // A random order: work the kernel defers (a network namespace is freed
    // by a background worker) must not always land in the same next variant.
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (const Variant v : order) {
      const uint64_t busy0 = cpu_jiffies().first;
      const auto t0 = Clock::now();
      struct {
        char variant;
        int32_t count;
      } batch{v, per_batch};
      for (auto& l : lanes) put(l.get(), &batch, sizeof batch, "lane");
      for (auto& l : lanes) {
        std::vector<int64_t> us(static_cast<size_t>(per_batch));
        if (!get(l.get(), us.data(), us.size() * sizeof us[0]))
          die("read", "lane results (a lane failed, see above)", EPIPE);
        latencies[v].insert(latencies[v].end(), us.begin(), us.end());
      }
      seconds[v] += std::chrono::duration<double>(Clock::now() - t0).count();
      // The CPU count includes what the kernel finishes just after the
      // batch (namespace and cgroup teardown in workers): it waits a little.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      busy_jiffies[v] += cpu_jiffies().first - busy0;
      done[v] += per_batch * o.lanes;
    }
  }
  lanes.clear();
  for (pid_t pid : lane_pids) ::waitpid(pid, nullptr, 0);

  utsname u{};
  ::uname(&u);
  std::printf(
      "Kernel %s, %ld CPUs online, cgroup %s; %d lanes, %d rounds, zygote heap %d MiB, %d KiB "
      "written per run\n\n",
      u.release, ::sysconf(_SC_NPROCESSORS_ONLN), version.c_str(), o.lanes, o.rounds, o.heap_mb, o.touch_kb);
  // CPU time per run: every CPU's busy time over the batches (and 200 ms
  // after each), so it includes the machine's other work; what it allows at
  // most when the CPUs are the bound.
  const double ms_per_jiffy = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::printf(
      "| variant | runs | runs/s | median ms | p90 ms | CPU ms/run | CPU-bound runs/s | what each "
      "run does |\n");
  std::printf("|---|--:|--:|--:|--:|--:|--:|---|\n");
  for (int v = 0; v < kVariantCount; ++v) {
    const double cpu_ms = static_cast<double>(busy_jiffies[v]) * ms_per_jiffy / done[v];
    std::printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.0f | %s |\n", kVariantNames[v], done[v],
                done[v] / seconds[v], percentile(latencies[v], 0.5), percentile(latencies[v], 0.9), cpu_ms,
                cpu_ms > 0 ? 1000.0 * static_cast<double>(cpus) / cpu_ms : 0.0, kVariantWork[v]);
  }
  return 0;
}
