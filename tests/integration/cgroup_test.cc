// Resource limits through cgroups (v1 on hybrid hosts, v2 in the VM rig):
// each test runs a real workload against a real limit.
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "node_process.h"
#include "nsbox/cgroup.h"
#include "nsbox/error.h"

namespace nsbox::testing {
namespace {

using json = nlohmann::json;

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + ",";
  return out;
}

int64_t mem_available_kib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t value;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "MemAvailable:") return value;
  return -1;
}

// Every run cgroup directory nsbox has under its parents right now.
std::vector<std::string> run_cgroup_dirs(const CgroupHost& host, pid_t owner = ::getpid()) {
  std::vector<std::string> parents;
  if (host.v2_mount) parents.push_back(host.v2_self_dir + "/nsbox");
  for (const auto& [c, dir] : host.v1_self_dirs) parents.push_back(dir + "/nsbox");
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  std::vector<std::string> out;
  for (const auto& parent : parents) {
    std::ostringstream cmd;
    if (DIR* d = ::opendir(parent.c_str())) {
      // Only this process's runs: other tests may run in parallel.
      const std::string own = "run-" + std::to_string(owner) + "-";
      while (dirent* e = ::readdir(d))
        if (std::string(e->d_name).rfind(own, 0) == 0) out.push_back(parent + "/" + e->d_name);
      ::closedir(d);
    }
  }
  return out;
}

class Cgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    const CgroupHost& host = launcher().cgroup_host();
    if (!host.missing({"memory", "cpu", "pids"}).empty())
      GTEST_SKIP() << "this host has no memory/cpu/pids cgroup controllers; the refusal is tested "
                      "by FailClosed.*";
  }
};

// PID 1 on a v1 host joins its run cgroup itself: nsbox opens the tasks
// files, the child (another user by then) writes "0" to each. The kernel
// checks that write against nsbox's credentials from the open; the child
// ends up in the run's cgroup in every hierarchy.
TEST_F(Cgroups, AChildJoinsItsRunCgroupThroughTheFdsNsboxOpened) {
  const CgroupHost& host = launcher().cgroup_host();
  const std::string version = host.choose({"memory", "cpu", "pids"});
  const std::string name = next_run_cgroup_name();
  auto cgroup = create_run_cgroup(host, version, CgroupLimits{.memory_bytes = 64 << 20, .pids = 16}, name);
  std::vector<UniqueFd> join = cgroup->open_join_fds();
  if (version == "v2") {
    EXPECT_TRUE(join.empty()) << "v2 clones PID 1 into its cgroup";
    EXPECT_GE(cgroup->clone_into_fd(), 0);
    return;
  }
  ASSERT_FALSE(join.empty());
  int out[2], hold[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(out[0]);
    ::close(hold[1]);
    // As the sandbox's user, in a user namespace of its own, as PID 1 is.
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0 || ::unshare(CLONE_NEWUSER) != 0)
      ::_exit(2);
    for (const auto& fd : join)
      if (::write(fd.get(), "0", 1) != 1) ::_exit(3);
    const std::string cgroups = slurp("/proc/self/cgroup");
    if (::write(out[1], cgroups.data(), cgroups.size()) != static_cast<ssize_t>(cgroups.size())) ::_exit(4);
    ::close(out[1]);
    char byte;
    while (::read(hold[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(out[1]);
  ::close(hold[0]);
  const size_t hierarchies = join.size();  // one tasks file per hierarchy
  join.clear();
  std::string seen;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) seen.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  // What nsbox checks of a forked PID 1 once it has joined.
  EXPECT_TRUE(cgroup->holds(child));
  EXPECT_FALSE(cgroup->holds(::getpid()));
  ::close(hold[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  // memory, cpu, cpuacct, pids, freezer: each line ends in the run's name.
  std::istringstream lines(seen);
  int joined_hierarchies = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool in_run = line.size() > name.size() && line.compare(line.size() - name.size(), name.size(), name) == 0;
    for (const char* c : {"memory", "pids"}) {
      if (line.find(std::string(":") + c + ":") != std::string::npos) {
        EXPECT_TRUE(in_run) << line;
      }
    }
    joined_hierarchies += in_run;
  }
  EXPECT_EQ(joined_hierarchies, static_cast<int>(hierarchies)) << seen;
}

TEST_F(Cgroups, MemoryBombEndsAsOomWithoutHurtingTheHost) {
  const int64_t before = mem_available_kib();
  RunSpec spec = capture_spec({"python3", "-c",
                               "chunks = []\n"
                               "while True: chunks.append(bytearray(8 << 20))\n"});
  spec.limits.cgroup.memory_bytes = 64 << 20;
  spec.limits.wall_time = std::chrono::seconds(20);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kOom) << r.error << r.stderr_data;
  EXPECT_TRUE(has(r.limits_hit, "memory")) << joined(r.limits_hit);
  EXPECT_LT(r.wall_ms, 20000);
  EXPECT_GT(r.peak_memory_bytes, 32 << 20);
  EXPECT_LE(r.peak_memory_bytes, (64 << 20) + (1 << 20));
  // The host lost at most a little more than the limit while it ran.
  EXPECT_GT(mem_available_kib(), before - 256 * 1024);
}

// A run that has its children OOM-killed one after another (each kill
// writes the host's kernel log, about 40 lines) ends at the first: v2's
// memory.oom.group kills the whole run, and on v1 the supervisor does.
// Before, on v1, the parent went on (67 kills in 5 s) and the run was ok.
TEST_F(Cgroups, ARunEndsAtItsFirstOomKill) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import os\n"
                               "for i in range(20):\n"
                               "    pid = os.fork()\n"
                               "    if pid == 0:\n"
                               "        chunks = []\n"
                               "        while True: chunks.append(bytearray(8 << 20))\n"
                               "    os.waitpid(pid, 0)\n"
                               "    print('child', i, 'ended', flush=True)\n"});
  spec.limits.cgroup.memory_bytes = 64 << 20;
  spec.limits.wall_time = std::chrono::seconds(30);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kOom) << r.error << r.stdout_data << r.stderr_data;
  EXPECT_TRUE(has(r.limits_hit, "memory")) << joined(r.limits_hit);
  EXPECT_EQ(r.stdout_data.find("child 1 ended"), std::string::npos) << "the run went on after an OOM kill:\n"
                                                                    << r.stdout_data;
}

// Socket buffers count against the run's memory: v1 charges them only once
// memory.kmem.tcp.limit_in_bytes is set (v2 always does). Forty loopback
// connections whose data nobody reads held 382 MiB of the host's memory
// under a 64 MiB limit before nsbox set it.
TEST_F(Cgroups, SocketBuffersAreBoundedByTheRunsMemoryLimit) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import socket\n"
                               "listener = socket.socket(); listener.bind(('127.0.0.1', 0)); listener.listen(64)\n"
                               "held, total = [], 0\n"
                               "for _ in range(40):\n"
                               "    c = socket.socket()\n"
                               "    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)\n"
                               "    c.connect(listener.getsockname()); c.setblocking(False)\n"
                               "    held += [c, listener.accept()[0]]\n"
                               "    try:\n"
                               "        while True: total += c.send(b'x' * (1 << 20))\n"
                               "    except BlockingIOError:\n"
                               "        pass\n"
                               "print(total >> 20)\n"});
  spec.limits.cgroup.memory_bytes = 64 << 20;
  spec.limits.wall_time = std::chrono::seconds(20);
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  const int queued_mib = std::stoi(r.stdout_data);
  EXPECT_GT(queued_mib, 0);
  EXPECT_LT(queued_mib, 160) << "MiB queued in socket buffers under a 64 MiB limit";
}

TEST_F(Cgroups, ForkBombStopsAtPidsMaxAndTheRunEndsOnTime) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import os\n"
                               "while True:\n"
                               "    try:\n"
                               "        os.fork()\n"
                               "    except OSError:\n"
                               "        pass\n"});
  spec.limits.cgroup.pids = 32;
  spec.limits.wall_time = std::chrono::seconds(3);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kTimeout);
  EXPECT_TRUE(has(r.limits_hit, "pids")) << joined(r.limits_hit);
  EXPECT_TRUE(has(r.limits_hit, "wall_time"));
  EXPECT_LT(r.wall_ms, in_vm_guest() ? 30000 : 6000);
}

// The CPU weight file among this process's run cgroups.
std::optional<WeightFile> run_weight_file() {
  for (const auto& dir : run_cgroup_dirs(launcher().cgroup_host()))
    if (auto weight = weight_file_in(dir)) return weight;
  return std::nullopt;
}

TEST_F(Cgroups, PreparedSandboxStartsAtItsStartWeightAndRunsAtTheDefault) {
  RunSpec spec = capture_spec({"sh", "-c", "read line; echo \"$line\"; sleep 1"});
  spec.limits.cgroup.cpus = 1;  // the cpu controller is in the run's cgroup
  spec.stdin_data = "";
  auto prepared = launcher().prepare(spec, 1);
  auto weight = run_weight_file();
  ASSERT_TRUE(weight) << "no cpu.weight or cpu.shares in this process's run cgroups";
  EXPECT_EQ(first_line(weight->path), weight->lowest) << "while it waits, the sandbox has the start weight";

  // Sampled only while finish() runs: the cgroup outlives it.
  Result r;
  std::atomic<bool> finished{false};
  std::thread run([&] {
    r = prepared->finish("go\n", std::chrono::seconds(10));
    finished = true;
  });
  bool seen_default = false;
  while (!finished && !seen_default) {
    const std::string now = first_line(weight->path);
    seen_default = !finished && now == weight->default_value;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.join();
  EXPECT_TRUE(seen_default) << "the run itself competes at the default weight";
  EXPECT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "go\n");
}

// A run's memory limit is not memory plus swap: v2 sets memory.swap.max
// to 0, v1 the cgroup's swappiness (memsw too, where swap is accounted).
TEST_F(Cgroups, ARunCannotSwapPastItsMemoryLimit) {
  RunSpec spec = capture_spec({"true"});
  spec.limits.cgroup.memory_bytes = 64ull << 20;
  spec.stdin_data = "";
  auto prepared = launcher().prepare(spec, 1);
  int checked = 0;
  for (const auto& dir : run_cgroup_dirs(launcher().cgroup_host())) {
    for (const char* file : {"memory.swappiness", "memory.swap.max"}) {
      if (::access((dir + "/" + file).c_str(), F_OK) != 0) continue;
      EXPECT_EQ(first_line(dir + "/" + file), "0") << dir << "/" << file;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no swap setting in the run's cgroups";
  const Result r = prepared->finish("", std::chrono::seconds(10));
  EXPECT_EQ(r.status, RunStatus::kOk) << r.error;
}

// Swap of the cgroup v2 guest's own: a zram device (tools/vm-test loads
// the module), turned on for the test's life and off after it.
class GuestSwap {
 public:
  GuestSwap() {
    on_ = std::system(
              "echo 1 > /sys/block/zram0/reset && echo 256M > /sys/block/zram0/disksize && "
              "mkswap /dev/zram0 >/dev/null && swapon /dev/zram0") == 0;
  }
  ~GuestSwap() {
    if (on_) (void)std::system("swapoff /dev/zram0");
  }
  GuestSwap(const GuestSwap&) = delete;
  GuestSwap& operator=(const GuestSwap&) = delete;
  bool on() const { return on_; }

 private:
  bool on_ = false;
};

// With swap on, a run that touches more than its memory limit is killed
// for it: its pages do not go to swap (memory.swap.max 0 on v2; on v1 the
// cgroup's swappiness 0 and memory+swap). Only in the cgroup v2 guest,
// which has a swap device of its own to turn on (zram); this host has no
// swap to prove it with.
TEST_F(Cgroups, ARunCannotGrowPastItsMemoryLimitThroughSwap) {
  if (!in_vm_guest() || ::access("/dev/zram0", F_OK) != 0)
    GTEST_SKIP() << "needs the cgroup v2 guest, whose zram device gives swap to turn on";
  GuestSwap swap;
  ASSERT_TRUE(swap.on()) << "could not turn swap on";
  const CliResult r = run_cli({"run", "--json", "--rootfs", test_rootfs(), "--memory", "64MiB", "--", "python3", "-c",
                               "b = bytearray(160 << 20)\n"
                               "for i in range(0, len(b), 4096): b[i] = 1\n"
                               "print('held 160 MiB')\n"});
  const json result = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << r.out << r.err;
  EXPECT_EQ(result["status"], "oom") << r.out;
  EXPECT_EQ(r.out.find("held 160 MiB"), std::string::npos) << "it grew past its limit into swap: " << r.out;
}

TEST_F(Cgroups, CpuBandwidthLimitThrottlesABusyLoop) {
  RunSpec spec = capture_spec({"python3", "-c", "while True: pass"});
  spec.limits.cgroup.cpus = 0.25;
  spec.limits.wall_time = std::chrono::seconds(2);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kTimeout);
  EXPECT_TRUE(has(r.limits_hit, "cpu")) << joined(r.limits_hit);
  // 0.25 CPU for 2 s of wall time is 0.5 s of CPU; unthrottled it would be ~2 s.
  EXPECT_LE(r.cpu_ms, 650) << "cgroup CPU figure";
  EXPECT_GE(r.cpu_ms, 300);
}

TEST_F(Cgroups, CpuTimeLimitKillsABusyLoopAfterAboutOneSecond) {
  RunSpec spec = capture_spec({"python3", "-c", "while True: pass"});
  spec.limits.cpu_time = std::chrono::seconds(1);
  spec.limits.wall_time = std::chrono::seconds(20);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kTimeout);
  EXPECT_TRUE(has(r.limits_hit, "cpu_time")) << joined(r.limits_hit);
  EXPECT_FALSE(has(r.limits_hit, "wall_time"));
  EXPECT_GE(r.cpu_ms, 1000);
  EXPECT_LE(r.cpu_ms, 1500);
}

TEST_F(Cgroups, UsageFiguresArePlausible) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import time\n"
                               "b = bytearray(40 << 20)\n"
                               "t = time.process_time()\n"
                               "while time.process_time() - t < 0.2: pass\n"});
  spec.limits.cgroup.memory_bytes = 256 << 20;
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_GE(r.cpu_ms, 200);
  EXPECT_LE(r.cpu_ms, r.wall_ms + 50);
  EXPECT_GE(r.peak_memory_bytes, 40 << 20);
  EXPECT_LT(r.peak_memory_bytes, 256 << 20);
  EXPECT_TRUE(r.limits_hit.empty()) << joined(r.limits_hit);
}

TEST_F(Cgroups, NoRunCgroupRemainsAfterManyRunsOfEveryKind) {
  const CgroupHost& host = launcher().cgroup_host();
  const auto before = run_cgroup_dirs(host);
  for (int i = 0; i < 200; ++i) {
    RunSpec spec = capture_spec({"true"});
    spec.limits.cgroup = {.memory_bytes = 64 << 20, .pids = 32, .cpus = 1};
    switch (i % 4) {
      case 0:
        break;
      case 1:
        spec.argv = {"sh", "-c", "sleep 10"};
        spec.limits.wall_time = std::chrono::milliseconds(30);
        break;
      case 2:
        spec.argv = {"sh", "-c", "kill -KILL $$"};
        break;
      case 3:
        if (i % 40 == 3) spec.argv = {"python3", "-c", "b = bytearray(100 << 20)"};
        break;
    }
    run_with(spec);
  }
  EXPECT_EQ(run_cgroup_dirs(host), before);
}

TEST_F(Cgroups, StaleCgroupOfAKilledNsboxIsRemovedAtTheNextStart) {
  const std::string marker = unique_token("nsbox-stale-");
  pid_t cli = spawn_cli({"run", "--rootfs", test_rootfs(), "--memory", "64MiB", "--", "python3", "-c",
                         "import time; time.sleep(1000)", marker});
  // Wait until its run cgroup exists, then kill nsbox without warning.
  const std::string prefix = "run-" + std::to_string(cli) + "-";
  std::vector<std::string> dirs;
  for (int i = 0; i < 500 && dirs.empty(); ++i) {
    for (const auto& d : run_cgroup_dirs(launcher().cgroup_host(), cli))
      if (d.find(prefix) != std::string::npos) dirs.push_back(d);
    ::usleep(10000);
  }
  ASSERT_FALSE(dirs.empty()) << "the run cgroup never appeared";
  ::kill(cli, SIGKILL);
  wait_cli(cli);
  for (const auto& d : dirs) EXPECT_EQ(::access(d.c_str(), F_OK), 0) << d << " should be left behind";
  // Any new nsbox removes it.
  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& d : dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " survived";
  EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "the run outlived its killed nsbox";
}

// Starts argv (a program looked up in PATH) as a child; its pid.
pid_t start_program(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// An nsbox in a pid namespace of its own (a container sharing the host's
// cgroups and /tmp) names its runs by pids of that namespace: the sweep of
// an nsbox outside it took them for a crashed nsbox's and killed a live
// run. Its runs are left alone while their namespace lives, and swept
// once it is gone.
TEST_F(Cgroups, ALiveRunOfAnotherPidNamespaceIsNotSweptAndADeadOnesIs) {
  const std::string marker = unique_token("nsbox-other-pidns-");
  const std::string nsbox = NSBOX_BINARY;
  const std::vector<std::string> args = {
      "unshare",     "--pid",    "--fork", "--mount-proc", nsbox,     "run", "--rootfs",
      test_rootfs(), "--memory", "64MiB",  "--",           "python3", "-c",  "import time; time.sleep(1000)",
      marker};
  const pid_t unshare = start_program(args);
  ASSERT_GT(unshare, 0);
  std::vector<pid_t> inner;
  struct KillOnExit {
    pid_t pid;
    const std::vector<pid_t>& inner;
    ~KillOnExit() {
      for (pid_t p : inner) ::kill(p, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  } kill_on_exit{unshare, inner};
  // Its run cgroup, named by pids of the other namespace (nsbox is PID 1
  // there) and by that namespace.
  struct stat ns {};
  std::vector<std::string> dirs;
  for (int i = 0; i < 2000 && dirs.empty(); ++i, ::usleep(10000)) {
    inner = descendants_with_cmdline(unshare, nsbox + " run");
    if (inner.empty() || ::stat(("/proc/" + std::to_string(inner[0]) + "/ns/pid").c_str(), &ns) != 0) continue;
    for (const auto& d : run_cgroup_dirs(launcher().cgroup_host(), 1))
      if (d.find("-p" + std::to_string(ns.st_ino)) != std::string::npos) dirs.push_back(d);
  }
  ASSERT_FALSE(dirs.empty()) << "no run cgroup named by the other namespace";
  ASSERT_TRUE(wait_for_process("python3 -c import time; time.sleep(1000) " + marker, 20000));

  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});  // sweeps
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& d : dirs) EXPECT_EQ(::access(d.c_str(), F_OK), 0) << d << " was swept under a live run";
  EXPECT_FALSE(host_pids_with_cmdline(marker).empty()) << "the other namespace's live run was killed";

  // Killed without warning, with its namespace: then it is a crashed one's,
  // which only an nsbox that sees every process may judge.
  struct stat own {};
  ASSERT_EQ(::stat("/proc/self/ns/pid", &own), 0);
  if (own.st_ino != 0xEFFFFFFCU) GTEST_SKIP() << "not in the host's first pid namespace: its runs are left alone";
  ::kill(unshare, SIGKILL);
  ::kill(inner[0], SIGKILL);
  wait_cli(unshare);
  EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "the run outlived its killed nsbox";
  // Its namespace ends with its last process (nsbox, reaped by init).
  const auto namespace_alive = [&] {
    for (const std::string& pid : dir_entries("/proc")) {
      struct stat st {};
      if (pid[0] >= '1' && pid[0] <= '9' && ::stat(("/proc/" + pid + "/ns/pid").c_str(), &st) == 0 &&
          st.st_ino == ns.st_ino)
        return true;
    }
    return false;
  };
  for (int i = 0; i < 500 && namespace_alive(); ++i) ::usleep(10000);
  ASSERT_FALSE(namespace_alive()) << "the other pid namespace outlived its processes' kill";
  // (Any nsbox may sweep them from here on: other tests run in parallel.)
  r = run_cli({"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& d : dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " survived its gone namespace";
}

// An nsbox in a time namespace of its own (a restored container's) reads
// every process's start time moved by that namespace's offset. Taken as
// is, its sweep took another nsbox's live run for a crashed one's and
// killed it, and the other nsbox did the same to its runs. Both read start
// times back on the host's clock: live runs stay, a killed nsbox's go.
TEST_F(Cgroups, AnNsboxInAnotherTimeNamespaceSweepsOnlyDeadRuns) {
  const std::string nsbox = NSBOX_BINARY;
  const std::vector<std::string> moved = {"unshare",   "--time",      "--fork",   "--boottime",
                                          "123456789", "--monotonic", "123456789"};
  for (const bool long_run_moved : {false, true}) {
    SCOPED_TRACE(long_run_moved ? "the long run's nsbox is in the time namespace" : "the sweeping one is");
    const std::string marker = unique_token("nsbox-other-timens-");
    std::vector<std::string> long_run = {nsbox,   "run", "--rootfs", test_rootfs(), "--memory",
                                         "64MiB", "--",  "python3",  "-c",          "import time; time.sleep(1000)",
                                         marker};
    std::vector<std::string> sweep = {nsbox, "run", "--rootfs", test_rootfs(), "--", "true"};
    std::vector<std::string>& in_namespace = long_run_moved ? long_run : sweep;
    in_namespace.insert(in_namespace.begin(), moved.begin(), moved.end());

    const pid_t starter = start_program(long_run);
    ASSERT_GT(starter, 0);
    pid_t owner = long_run_moved ? 0 : starter;
    struct KillOnExit {
      const pid_t& starter;
      const pid_t& owner;
      ~KillOnExit() {
        if (owner > 0) ::kill(owner, SIGKILL);
        ::kill(starter, SIGKILL);
      }
    } kill_on_exit{starter, owner};
    std::vector<std::string> dirs;
    for (int i = 0; i < 2000 && dirs.empty(); ++i, ::usleep(10000)) {
      if (owner == 0) {
        const std::vector<pid_t> found = descendants_with_cmdline(starter, nsbox + " run");
        if (found.empty()) continue;
        owner = found[0];
      }
      dirs = run_cgroup_dirs(launcher().cgroup_host(), owner);
    }
    ASSERT_FALSE(dirs.empty()) << "the long run's cgroup never appeared";
    ASSERT_TRUE(wait_for_process("python3 -c import time; time.sleep(1000) " + marker, 20000));

    EXPECT_EQ(wait_cli(start_program(sweep)), 0);
    for (const auto& d : dirs) EXPECT_EQ(::access(d.c_str(), F_OK), 0) << d << " was swept under a live run";
    EXPECT_FALSE(host_pids_with_cmdline(marker).empty()) << "the other time namespace's sweep killed a live run";

    // Killed without warning: then its runs are a crashed nsbox's.
    ::kill(owner, SIGKILL);
    ::kill(starter, SIGKILL);
    wait_cli(starter);
    EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "the run outlived its killed nsbox";
    // A zombie still has its start time: unshare's nsbox is reaped by init.
    const std::string owner_proc = "/proc/" + std::to_string(owner);
    for (int i = 0; i < 500 && ::access(owner_proc.c_str(), F_OK) == 0; ++i) ::usleep(10000);
    ASSERT_NE(::access(owner_proc.c_str(), F_OK), 0) << "the killed nsbox was never reaped";
    EXPECT_EQ(wait_cli(start_program(sweep)), 0);
    for (const auto& d : dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " survived its killed nsbox";
  }
}

// nsbox killed at every moment of a sandbox's setup, from just before its
// clone to the workload's start: no part of the run may outlive it, not even
// a half-made sandbox waiting for a go that never comes.
TEST_F(Cgroups, NoRunOutlivesAnNsboxKilledDuringItsSetup) {
  const std::string marker = unique_token("nsbox-setup-kill-");
  for (int i = 0; i < 40; ++i) {
    pid_t cli = spawn_cli({"run", "--rootfs", test_rootfs(), "--memory", "64MiB", "--", "python3", "-c",
                           "import time; time.sleep(1000)", marker});
    const std::string prefix = "run-" + std::to_string(cli) + "-";
    bool made = false;
    for (int j = 0; j < 5000 && !made; ++j) {
      for (const auto& d : run_cgroup_dirs(launcher().cgroup_host(), cli)) made |= d.find(prefix) != std::string::npos;
      if (!made) ::usleep(200);
    }
    ::usleep(static_cast<useconds_t>(i % 20) * 250);  // 0 to 4.75 ms past the cgroup's making
    ::kill(cli, SIGKILL);
    wait_cli(cli);
  }
  EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "a run outlived its killed nsbox";
  for (pid_t survivor : host_pids_with_cmdline(marker)) ::kill(survivor, SIGKILL);
  // The next nsbox removes the killed ones' cgroups.
  EXPECT_EQ(run_cli({"run", "--rootfs", test_rootfs(), "--", "true"}).exit_code, 0);
}

// A cgroup of the test's own below the test's, in the v2 tree and every v1
// hierarchy, for an nsbox that must be alone in its cgroup: what nsbox
// leaves in it is seen and nothing of other tests is. Removed at the end,
// with whatever was left in it.
class OwnCgroup {
 public:
  // The v1 hierarchies nsbox makes run cgroups in (cpuset, which a process
  // cannot join before its cpus are set, is not one).
  static inline const std::set<std::string> kRunHierarchies = {"memory", "cpu", "cpuacct", "pids", "freezer"};

  explicit OwnCgroup(const CgroupHost& host) : host_(host), name_(unique_token("nsbox-test-own-")) {
    for (const auto& dir : dirs())
      if (::mkdir(dir.c_str(), 0755) != 0) ADD_FAILURE() << "mkdir " << dir << ": " << std::strerror(errno);
  }
  ~OwnCgroup() {
    for (const auto& dir : dirs()) {
      for (const auto& sub : subdirs_left()) {
        for (const auto& run : dir_entries(sub)) ::rmdir((sub + "/" + run).c_str());
        ::rmdir(sub.c_str());
      }
      if (::rmdir(dir.c_str()) != 0) ADD_FAILURE() << "rmdir " << dir << ": " << std::strerror(errno);
    }
  }
  // Its directories, one per hierarchy.
  std::vector<std::string> dirs() const {
    std::set<std::string> out;
    if (host_.v2_mount) out.insert(host_.v2_self_dir + "/" + name_);
    for (const auto& [controller, dir] : host_.v1_self_dirs)
      if (kRunHierarchies.contains(controller)) out.insert(dir + "/" + name_);
    return {out.begin(), out.end()};
  }
  // The cgroup.procs files a process writes "0" to, to join it; on v2 its
  // leaf v2_leaf instead when given.
  std::vector<std::string> procs_files(const std::string& v2_leaf = "") const {
    std::vector<std::string> out;
    for (const auto& dir : dirs()) {
      const bool v2 = host_.v2_mount && dir == host_.v2_self_dir + "/" + name_;
      out.push_back(dir + (v2 && !v2_leaf.empty() ? "/" + v2_leaf : "") + "/cgroup.procs");
    }
    return out;
  }
  // Cgroups below it, by path.
  std::set<std::string> subdirs_left() const {
    std::set<std::string> out;
    for (const auto& dir : dirs()) {
      for (const auto& entry : dir_entries(dir)) {
        struct stat st {};
        if (::stat((dir + "/" + entry).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.insert(dir + "/" + entry);
      }
    }
    return out;
  }
  // What nsbox leaves when it ends: nothing, but on a host that limits
  // runs through cgroup v2 the leaf its processes moved into.
  std::set<std::string> expected_left() const {
    if (host_.choose({"memory", "cpu", "pids"}) != "v2") return {};
    return {host_.v2_self_dir + "/" + name_ + "/nsbox-supervisor"};
  }
  // The host as an nsbox in this cgroup sees it.
  CgroupHost as_host() const {
    CgroupHost own = host_;
    if (own.v2_mount) own.v2_self_dir += "/" + name_;
    std::erase_if(own.v1_self_dirs, [](const auto& entry) { return !kRunHierarchies.contains(entry.first); });
    for (auto& [controller, dir] : own.v1_self_dirs) dir += "/" + name_;
    return own;
  }

 private:
  const CgroupHost& host_;
  std::string name_;
};

std::string joined(const std::set<std::string>& v) { return joined(std::vector<std::string>(v.begin(), v.end())); }

// `nsbox run -- RUN_ARGS` started in the cgroup whose cgroup.procs files
// are procs (through a shell that joins it and execs nsbox), its stdin a
// pipe the caller holds (*stdin_fd), its stdout /dev/null, its stderr
// stderr_file when given.
pid_t nsbox_run_in(const std::vector<std::string>& procs, const std::vector<std::string>& run_args, int* stdin_fd,
                   const std::string& stderr_file = "") {
  std::string script = "for f in";
  for (const auto& p : procs) script += " '" + p + "'";
  script += "; do echo 0 > \"$f\" || exit 99; done; r=$1; shift; exec \"$0\" run --rootfs \"$r\" -- \"$@\"";
  std::vector<std::string> args = {"/bin/sh", "-c", script, NSBOX_BINARY, test_rootfs()};
  args.insert(args.end(), run_args.begin(), run_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int in[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(::open("/dev/null", O_WRONLY), 1);
    if (!stderr_file.empty()) ::dup2(::open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 2);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  ::close(in[0]);
  *stdin_fd = in[1];
  return pid;
}

// An nsbox that ends removes the parent it made its runs in, unless another
// nsbox still has a run there; the last one leaves nothing. (Two `nsbox
// run` at once in one cgroup: on v2 the second starts in the leaf the first
// moved into, as the cgroup then admits no process.)
TEST_F(Cgroups, NsboxRunsThatEndLeaveNoCgroupTheyMadeBehind) {
  OwnCgroup own(launcher().cgroup_host());
  int first_in = -1, second_in = -1;
  // The first holds its run until its stdin closes.
  const pid_t first = nsbox_run_in(own.procs_files(), {"head", "-c", "1"}, &first_in);
  std::set<std::string> parents_seen;
  for (int i = 0; i < 3000 && parents_seen.empty(); ++i) {
    for (const auto& sub : own.subdirs_left())
      if (sub.ends_with("/nsbox") && !dir_entries(sub).empty()) parents_seen.insert(sub);
    if (parents_seen.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(parents_seen.empty()) << "the first run's cgroup never appeared in the test's cgroup";
  const bool v2 = !own.expected_left().empty();
  const pid_t second = nsbox_run_in(own.procs_files(v2 ? "nsbox-supervisor" : ""), {"true"}, &second_in);
  ::close(second_in);
  EXPECT_EQ(wait_cli(second), 0);
  for (const auto& parent : parents_seen)
    EXPECT_FALSE(dir_entries(parent).empty()) << parent << ": the second nsbox took the first's parent or run";
  ::close(first_in);
  EXPECT_EQ(wait_cli(first), 0) << "the first run did not survive the second nsbox's end";
  EXPECT_EQ(own.subdirs_left(), own.expected_left()) << joined(own.subdirs_left());
}

// The path of pid's cgroup v2 ("0::PATH" in /proc/PID/cgroup).
std::string v2_path_of(pid_t pid) {
  std::istringstream lines(slurp("/proc/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("0::")) return line.substr(3);
  return "";
}

// An OOM of a cgroup above the runs' (a memory limit on nsbox's service,
// here on the test's own cgroup) ends only the run the kernel killed in,
// which is told that its own limit was not reached; another run goes on.
// (v1's OOM notification comes to every cgroup below the one at its limit:
// the first version ended every run there as oom.)
TEST_F(Cgroups, AnOomAboveTheRunsCgroupEndsOnlyTheRunItKilledAndSaysSo) {
  const CgroupHost& host = launcher().cgroup_host();
  const std::string version = host.choose({"memory"});
  const std::string hierarchy = version == "v2"                        ? host.v2_self_dir
                                : host.v1_self_dirs.contains("memory") ? host.v1_self_dirs.at("memory")
                                                                       : "";
  if (hierarchy.empty()) GTEST_SKIP() << "no memory controller";
  OwnCgroup own(host);
  std::string limit_file;
  for (const auto& dir : own.dirs())
    if (dir.starts_with(hierarchy + "/"))
      limit_file = dir + (version == "v2" ? "/memory.max" : "/memory.limit_in_bytes");
  if (::access(limit_file.c_str(), W_OK) != 0) GTEST_SKIP() << limit_file << ": the test cannot limit its own cgroup";
  std::ofstream(limit_file) << (192 << 20);
  const std::string marker = "sleep 1019";
  int sleeper_in = -1, hog_in = -1;
  // The marker is in the sleep's command line only, not in nsbox's.
  const pid_t sleeper = nsbox_run_in(own.procs_files(), {"sh", "-c", "n=1019; exec sleep $n"}, &sleeper_in);
  ::close(sleeper_in);
  for (int i = 0; i < 500 && host_pids_with_cmdline(marker).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(host_pids_with_cmdline(marker).empty()) << "the sleeping run did not start";
  // 320 MiB, under the run's own 512 MiB but over the cgroup above it.
  TempDir scratch;
  const std::string hog_err = scratch.path() + "/hog.err";
  // On v2 the sleeper's nsbox has left the test's cgroup for a leaf below
  // it (no process may sit beside the runs' cgroups): the hog joins it there.
  std::vector<std::string> hog_procs = own.procs_files();
  if (version == "v2") {
    for (auto& file : hog_procs)
      if (file.starts_with(host.v2_self_dir + "/")) file = *host.v2_mount + v2_path_of(sleeper) + "/cgroup.procs";
  }
  const pid_t hog = nsbox_run_in(
      hog_procs, {"python3", "-c", "chunks = [bytearray(8 << 20) for _ in range(40)]\nimport time\ntime.sleep(5)"},
      &hog_in, hog_err);
  ::close(hog_in);
  const int hog_status = wait_cli(hog);
  EXPECT_EQ(hog_status, 128 + SIGKILL) << "the hog was not OOM-killed: " << slurp(hog_err) << " (it joined "
                                       << joined(hog_procs) << ")";
  EXPECT_NE(slurp(hog_err).find("nsbox: memory ran out above the run"), std::string::npos) << slurp(hog_err);
  EXPECT_EQ(slurp(hog_err).find("memory limit of"), std::string::npos) << "told its own limit was reached";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a wrongly ended run would be gone by now
  const std::vector<pid_t> sleeping = host_pids_with_cmdline(marker);
  EXPECT_FALSE(sleeping.empty()) << "the OOM above ended the sleeping run";
  for (pid_t p : sleeping) ::kill(p, SIGKILL);  // ends the sleeping run now
  EXPECT_EQ(wait_cli(sleeper), 128 + SIGKILL);
  // While the cgroup above is at its limit, a killed process can take over
  // the second nsbox waits for it to exit (its run cgroup then stays for
  // the next nsbox to remove): this test's cgroup is removed once its
  // processes are gone.
  auto any_process_left = [&] {
    for (const auto& sub : own.subdirs_left())
      for (const auto& run : dir_entries(sub))
        if (run.starts_with("run-") && !slurp(sub + "/" + run + "/cgroup.procs").empty()) return true;
    return false;
  };
  for (int i = 0; i < 500 && any_process_left(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// On cgroup v2 a cgroup that holds another program's process cannot hand
// controllers down (the no-internal-processes rule), and nsbox never moves
// other programs' processes: `nsbox run` from a login shell is refused,
// saying why, which processes and what to do; the other process stays
// where it was, and nsbox makes no cgroup for nothing. On
// v1 there is no such rule and the run goes ahead.
TEST_F(Cgroups, NsboxRunInACgroupSharedWithAnotherProgram) {
  OwnCgroup own(launcher().cgroup_host());
  const std::vector<std::string> procs = own.procs_files();
  const pid_t other = ::fork();
  if (other == 0) {
    for (const auto& p : procs) {
      const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(99);
      ::close(fd);
    }
    ::pause();
    ::_exit(0);
  }
  const std::string own_v2_path = own.dirs().front().substr(own.dirs().front().rfind('/'));
  for (int i = 0; i < 500 && slurp("/proc/" + std::to_string(other) + "/cgroup").find(own_v2_path) == std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  TempDir tmp;
  const std::string err_file = tmp.path() + "/stderr";
  int in = -1;
  const pid_t nsbox = nsbox_run_in(procs, {"true"}, &in, err_file);
  ::close(in);
  const int code = wait_cli(nsbox);
  const std::string err = slurp(err_file);
  const std::string other_cgroups = slurp("/proc/" + std::to_string(other) + "/cgroup");
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
  if (own.expected_left().empty()) {
    EXPECT_EQ(code, 0) << err;
    return;
  }
  EXPECT_NE(code, 0);
  EXPECT_NE(err.find("other processes share nsbox's cgroup: pids " + std::to_string(other) + ";"), std::string::npos)
      << err;
  EXPECT_EQ(own.subdirs_left(), std::set<std::string>{}) << "a refused nsbox made a cgroup";
  EXPECT_NE(err.find("systemd-run --scope -p Delegate=yes"), std::string::npos) << err;
  std::istringstream lines(other_cgroups);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) {
      EXPECT_TRUE(line.ends_with(own_v2_path)) << "the other process was moved: " << line;
    }
}

// A cgroup v2 parent that was not given the cpu controller, as systemd
// leaves a unit or scope without Delegate=yes while the root has it: the
// refusal says the controller was withheld and how to get it, rather than
// only that the host has none and best-effort.
TEST_F(Cgroups, AControllerWithheldFromNsboxsCgroupIsNamedAsSuch) {
  const CgroupHost& host = launcher().cgroup_host();
  if (host.choose({"memory", "cpu", "pids"}) != "v2") GTEST_SKIP() << "needs a host that limits runs through cgroup v2";
  OwnCgroup own(host);
  const std::string parent = own.as_host().v2_self_dir;
  const std::string withheld = parent + "/no-cpu";
  std::ofstream(parent + "/cgroup.subtree_control") << "+memory +pids";
  ASSERT_EQ(slurp(parent + "/cgroup.subtree_control"), "memory pids\n");
  ASSERT_EQ(::mkdir(withheld.c_str(), 0755), 0);
  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--cgroup-parent", withheld, "--", "true"});
  ::rmdir(withheld.c_str());
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("the run asks for cpu limits but this host has no cpu controller"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the cgroup v2 root has cpu, but nsbox's cgroup was not given it"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("systemd-run --scope -p Delegate=yes"), std::string::npos) << r.err;
}

// Anyone who can open nsbox's cgroup directory can flock it: another user
// holding the lock nsbox serialises the parent's removal with must not
// stall nsbox (a blocking lock hung the first run's creation and the end
// of every nsbox). The run goes ahead; the parent is left.
TEST_F(Cgroups, ALockAnotherUserHoldsOnNsboxsCgroupStallsNothing) {
  OwnCgroup own(launcher().cgroup_host());
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const std::vector<std::string> dirs = own.dirs();
  const pid_t holder = ::fork();
  if (holder == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(2);
    for (const auto& dir : dirs) {
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(3);
    }
    if (::write(ready[1], "x", 1) != 1) ::_exit(4);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the other user could not lock the directories";
  ::close(ready[0]);
  int in = -1;
  const pid_t nsbox = nsbox_run_in(own.procs_files(), {"true"}, &in);
  ::close(in);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 6000 && (done = ::waitpid(nsbox, &status, WNOHANG)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (done == 0) {
    ::kill(nsbox, SIGKILL);
    ::waitpid(nsbox, &status, 0);
  }
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ASSERT_EQ(done, nsbox) << "nsbox was still waiting after 60 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// The parent goes whenever an nsbox sharing the cgroup ends with no run in
// it, maybe between another one's mkdir of the parent and of its run: runs
// are made all the same.
TEST_F(Cgroups, ARunIsMadeWhileAnotherNsboxRemovesTheEmptyParent) {
  OwnCgroup own(launcher().cgroup_host());
  const CgroupHost host = own.as_host();
  const std::string version = host.choose({"memory", "cpu", "pids"});
  std::atomic<bool> done{false};
  std::atomic<int> removals{0};
  std::thread other_nsbox([&] {
    for (; !done; ++removals) remove_empty_run_parents(host);
  });
  int made = 0;
  for (int i = 0; i < 150; ++i) {
    try {
      create_run_cgroup(host, version, CgroupLimits{.memory_bytes = 64 << 20, .pids = 16, .cpus = 1},
                        next_run_cgroup_name());
      ++made;
    } catch (const SysError& e) {
      ADD_FAILURE() << "run " << i << ": " << e.what();
      break;
    }
  }
  done = true;
  other_nsbox.join();
  EXPECT_EQ(made, 150);
  EXPECT_GT(removals, 150);
  remove_empty_run_parents(host);
  EXPECT_EQ(own.subdirs_left(), std::set<std::string>{}) << joined(own.subdirs_left());
}

// A node started alone in a cgroup (a systemd unit with Delegate=yes): on
// cgroup v2 the cgroup holds its server and spawner, and could not hand
// the controllers down to runs unless both leave it. Its runs get their
// limits, and once it stops nothing it made is left but that leaf.
TEST_F(Cgroups, ANodeAloneInItsCgroupRunsWithLimitsAndLeavesNothingWhenStopped) {
  OwnCgroup own(launcher().cgroup_host());
  std::vector<pid_t> spawner;
  {
    NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n", "",
                     own.procs_files());
    ASSERT_TRUE(node.ready()) << node.log();
    spawner = children_of(node.pid());
    auto r = post(node.client(), "/run",
                  request("class Args:\n    def __init__(self, inputs):\n        self.num = inputs['num']\n"
                          "def main(args):\n    return args.num * 2",
                          {{"num", 21}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["return"], 42) << r->body;
    EXPECT_TRUE(wait_metric(node, "nsbox_pool_idle", 1)) << "no warm sandbox to tear down at the stop";
    EXPECT_EQ(node.stop(SIGTERM), 0) << node.log();
  }
  for (int i = 0; i < 1500 && !spawner.empty() && ::kill(spawner[0], 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(own.subdirs_left(), own.expected_left()) << joined(own.subdirs_left());
}

// A node whose spawner dies (the OOM killer, an operator) stops; the
// spawner never gets to remove the run-parent cgroup it made, so the node
// does (it stayed, in every hierarchy, until the next nsbox's run).
TEST_F(Cgroups, ANodeWhoseSpawnerDiedLeavesNoCgroupItMadeBehind) {
  OwnCgroup own(launcher().cgroup_host());
  {
    NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\n", "", own.procs_files());
    ASSERT_TRUE(node.ready()) << node.log();
    auto r = post(node.client(), "/run", request("def main(args):\n    return 1"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    const std::vector<pid_t> spawner = children_of(node.pid());
    ASSERT_EQ(spawner.size(), 1u);
    ASSERT_EQ(::kill(spawner[0], SIGKILL), 0);
    EXPECT_EQ(node.wait_exit(), 1) << node.log();
  }
  EXPECT_EQ(own.subdirs_left(), own.expected_left()) << joined(own.subdirs_left());
}

// A process the test holds frozen in a v1 freezer cgroup of its own: it
// stands for a process stuck in the kernel (a stalled NFS or FUSE file),
// which SIGKILL does not end until it wakes. Thawed (and so ended, once
// killed) when it goes.
class FrozenProcess {
 public:
  explicit FrozenProcess(const std::string& freezer_dir) : dir_(freezer_dir) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sleep", "sleep", "600", nullptr);
      ::_exit(127);
    }
    if (::mkdir(dir_.c_str(), 0755) != 0) ADD_FAILURE() << "mkdir " << dir_ << ": " << std::strerror(errno);
    write_file(dir_ + "/cgroup.procs", std::to_string(pid_));
    write_file(dir_ + "/freezer.state", "FROZEN");
    for (int i = 0; i < 500 && !frozen(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~FrozenProcess() {
    thaw();
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    for (int i = 0; i < 500 && ::rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_t pid() const { return pid_; }
  bool frozen() const { return slurp(dir_ + "/freezer.state").starts_with("FROZEN"); }
  void thaw() const { write_file(dir_ + "/freezer.state", "THAWED"); }
  // Whether it has ended (killed while frozen, it ends once thawed).
  bool ended() const { return ::waitpid(pid_, nullptr, WNOHANG) == pid_ || ::kill(pid_, 0) != 0; }

 private:
  static void write_file(const std::string& path, const std::string& value) {
    std::ofstream out(path);
    out << value << std::flush;
    if (!out) ADD_FAILURE() << "write " << value << " to " << path;
  }
  std::string dir_;
  pid_t pid_ = -1;
};

// The node's log, once it holds `text` (within 30 s), else "".
std::string node_log_once_it_says(const NodeProcess& node, const std::string& text) {
  for (int i = 0; i < 1500; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    if (const std::string log = node.log(); log.find(text) != std::string::npos) return log;
  return "";
}

// A process of a run that SIGKILL cannot end within the second nsbox waits
// keeps the run's cgroup from being removed when the run ends. The node
// removes it once the process has ended, not at its next start: the
// cgroup is named after its worker, which is gone, and was swept only when
// a worker was killed. (The test's process stands in the run's memory
// cgroup, frozen by the test's own freezer cgroup: a v2-frozen process dies
// at SIGKILL, so this is v1's.)
TEST_F(Cgroups, ARunCgroupHeldByAProcessSigkillDidNotEndIsRemovedOnceItEnds) {
  const CgroupHost& host = launcher().cgroup_host();
  if (host.choose({"memory", "cpu", "pids"}) != "v1" || !host.v1_self_dirs.contains("freezer"))
    GTEST_SKIP() << "a process that SIGKILL does not end is made with the v1 freezer";
  OwnCgroup own(host);
  NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\nlimits:\n  pool_size: 0\n", "",
                   own.procs_files());
  ASSERT_TRUE(node.ready()) << node.log();
  const std::string runs = own.as_host().v1_self_dirs.at("memory") + "/nsbox";
  std::optional<httplib::Result> answer;
  std::thread client([&] {
    answer = post(node.client(), "/run", request("import time\ndef main(args):\n    time.sleep(3)\n    return 7"));
  });
  std::vector<std::string> run;
  for (int i = 0; i < 1000 && run.empty(); ++i, std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    for (const auto& name : dir_entries(runs))
      if (name.starts_with("run-")) run.push_back(runs + "/" + name);
  if (run.empty()) {
    client.join();
    FAIL() << "the run's memory cgroup never appeared in " << runs << "\n" << node.log();
  }
  FrozenProcess stuck(own.as_host().v1_self_dirs.at("freezer") + "/" + unique_token("stuck-"));
  std::ofstream join(run[0] + "/cgroup.procs");
  join << stuck.pid() << std::flush;
  EXPECT_TRUE(join) << "could not move the frozen process into " << run[0];
  EXPECT_TRUE(stuck.frozen());
  client.join();
  ASSERT_TRUE(answer && *answer);
  EXPECT_EQ((*answer)->status, 200) << (*answer)->body;
  EXPECT_EQ(json::parse((*answer)->body)["return"], 7) << (*answer)->body;

  // The run's worker gave up on its cgroup, and the spawner knows.
  EXPECT_NE(node_log_once_it_says(node, "still hold a process that SIGKILL has not ended"), "") << node.log();
  EXPECT_EQ(::access(run[0].c_str(), F_OK), 0) << "the run's cgroup went while the process was in it";
  EXPECT_FALSE(stuck.ended());
  stuck.thaw();
  EXPECT_NE(node_log_once_it_says(node, "the run cgroups left behind are removed"), "") << node.log();
  std::vector<std::string> left;
  for (const auto& dir : own.dirs())
    for (const auto& name : dir_entries(dir + "/nsbox"))
      if (name.starts_with("run-")) left.push_back(dir + "/nsbox/" + name);
  EXPECT_TRUE(left.empty()) << joined(left);
  // And the node goes on serving.
  auto next = post(node.client(), "/run", request("def main(args):\n    return 8"));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
}

// A host whose cgroups offer no controllers (v2 mounted, nothing delegated).
CgroupHost host_without_controllers() {
  CgroupHost host;
  host.v2_mount = "/sys/fs/cgroup/unified";
  host.v2_self_dir = "/nonexistent/nsbox-cgroup";
  return host;
}

// A v1 host where a limit's hierarchy is missing: no run cgroup is made
// (the caller then refuses the run, or runs it best-effort with stand-ins),
// and what was made in the other hierarchies is removed.
TEST(FailClosed, AV1LimitWithoutItsHierarchyMakesNoCgroup) {
  const CgroupHost& real = launcher().cgroup_host();
  if (!real.v1_self_dirs.contains("pids")) GTEST_SKIP() << "no cgroup v1 pids hierarchy on this host";
  CgroupHost host;
  host.v1_self_dirs["pids"] = real.v1_self_dirs.at("pids");
  const std::string name = next_run_cgroup_name();
  try {
    create_run_cgroup(host, "v1", CgroupLimits{.memory_bytes = 64 << 20}, name);
    ADD_FAILURE() << "a memory limit was accepted without a memory hierarchy";
  } catch (const SysError& e) {
    EXPECT_NE(std::string(e.what()).find("no memory hierarchy"), std::string::npos) << e.what();
  }
  const std::string made = real.v1_self_dirs.at("pids") + "/nsbox/" + name;
  EXPECT_NE(::access(made.c_str(), F_OK), 0) << made << " remained";
}

TEST(FailClosed, MemoryLimitWithoutMemoryControllerIsRefused) {
  Launcher l(LauncherOptions{.cgroup_parent = {}, .cgroup_host = host_without_controllers()});
  RunSpec spec = capture_spec({"true"});
  spec.limits.cgroup.memory_bytes = 64 << 20;
  Result r = l.run(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.error.find("the run asks for memory limits but this host has no memory controller"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("best-effort"), std::string::npos);
}

TEST(FailClosed, BestEffortRunsWithAWarningAndStandIns) {
  Launcher l(LauncherOptions{.cgroup_parent = {}, .cgroup_host = host_without_controllers()});
  RunSpec spec = capture_spec({"python3", "-c",
                               "import resource as r\n"
                               "print(r.getrlimit(r.RLIMIT_DATA)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0])\n"});
  spec.limits.cgroup.memory_bytes = 64 << 20;
  spec.limits.cgroup.pids = 50;
  spec.limits.best_effort = true;
  Result r = l.run(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "64 50\n") << "RLIMIT_DATA and RLIMIT_NPROC stand in";
  EXPECT_NE(joined(r.warnings).find("memory limit applied per process as RLIMIT_DATA"), std::string::npos)
      << joined(r.warnings);
}

// This host's v1 hierarchies without cpuacct: a cgroup that limits memory,
// CPU bandwidth and pids but cannot count CPU time. Empty where the host has
// no v1 memory, cpu and pids (the VM rig is v2-only).
std::optional<CgroupHost> v1_host_without_cpuacct() {
  CgroupHost host = launcher().cgroup_host();
  for (const char* c : {"memory", "cpu", "pids"})
    if (!host.v1_self_dirs.count(c)) return std::nullopt;
  host.v2_mount.reset();
  host.v2_controllers.clear();
  host.v1_self_dirs.erase("cpuacct");
  return host;
}

TEST(FailClosed, CpuTimeWithoutCpuAccountingIsRefused) {
  auto host = v1_host_without_cpuacct();
  if (!host) GTEST_SKIP() << "needs cgroup v1 memory, cpu and pids hierarchies";
  Launcher l(LauncherOptions{.cgroup_parent = {}, .cgroup_host = *host});
  RunSpec spec = capture_spec({"true"});
  spec.limits.cpu_time = std::chrono::seconds(2);
  Result r = l.run(spec);
  EXPECT_EQ(r.status, RunStatus::kSetupError);
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.error.find("cpu_time needs the run's CPU time, and its cgroup cannot measure it"), std::string::npos)
      << r.error;
  EXPECT_TRUE(run_cgroup_dirs(launcher().cgroup_host()).empty()) << "the refused run's cgroup is removed";
}

TEST(FailClosed, BestEffortCpuTimeWithoutCpuAccountingFallsBackToRlimitCpu) {
  auto host = v1_host_without_cpuacct();
  if (!host) GTEST_SKIP() << "needs cgroup v1 memory, cpu and pids hierarchies";
  Launcher l(LauncherOptions{.cgroup_parent = {}, .cgroup_host = *host});
  RunSpec spec = capture_spec({"python3", "-c", "import resource as r\nprint(r.getrlimit(r.RLIMIT_CPU)[0])\n"});
  spec.limits.cpu_time = std::chrono::seconds(2);
  spec.limits.cgroup.memory_bytes = 256 << 20;
  spec.limits.best_effort = true;
  Result r = l.run(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "2\n") << "RLIMIT_CPU stands in for the cgroup's CPU time";
  EXPECT_NE(joined(r.warnings).find("cpu_time applied per process as RLIMIT_CPU"), std::string::npos)
      << joined(r.warnings);
  EXPECT_GT(r.peak_memory_bytes, 0) << "the cgroup still limits and measures memory";
}

}  // namespace
}  // namespace nsbox::testing
