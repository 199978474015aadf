// The node's warm pool: sandboxes started ahead of their run, one per run,
// never reused. Functional tests only (docs/PERFORMANCE.md has the timings).
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "node_process.h"

namespace nsbox::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json run_v1(const NodeProcess& node, const std::string& code, const std::string& language = "python",
            double timeout = 0) {
  auto r = post(node.client(), "/v1/runs", request(code, json::object(), timeout, language));
  if (!r) return json::object();
  json j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

// The profile of a pool test: the default one, or the default one whose
// Python runs come from the fork server (fork_server: true).
std::string pool_profile(const TempDir& dir, bool fork_server) {
  return fork_server ? dir.write("forked.yaml", "name: forked\nextends: default\nfork_server: true\n") : "default";
}

std::string kind_name(const ::testing::TestParamInfo<bool>& p) { return p.param ? "ForkServer" : "Started"; }

// Every pool test runs twice: with warm sandboxes started from nothing, and
// with Python's forked by the fork server.
class Pool : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(node_.ready()) << node_.log();
    ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 2)) << node_.log();  // one per language
  }
  TempDir dir_;
  NodeProcess node_{"tenants:\n  - {name: t, profile: " + pool_profile(dir_, GetParam()) +
                    "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n"};
};

INSTANTIATE_TEST_SUITE_P(Kinds, Pool, ::testing::Bool(), kind_name);

TEST_P(Pool, WarmRunsAnswerInBothLanguages) {
  json py = run_v1(node_, "def main(args):\n    return 6 * 7");
  EXPECT_EQ(py["return"], 42) << py.dump();
  EXPECT_EQ(py["pool"], "warm");
  json js = run_v1(node_, "function main(args) { return 6 * 7; }", "javascript");
  EXPECT_EQ(js["return"], 42) << js.dump();
  EXPECT_EQ(js["pool"], "warm");
  EXPECT_EQ(metric(node_, "nsbox_pool_hits_total"), 2);
  ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 2)) << node_.log();
  EXPECT_GT(metric(node_, "nsbox_pool_idle_memory_bytes"), 2 << 20) << "what the waiting interpreters hold";
}

// A waiting sandbox's PID 1 (and the fork server's) holds no file of the
// host: its stdio came from the node (node.log here), and the workload has
// pipes of its own.
TEST_P(Pool, NoSandboxsPid1HoldsTheNodesFiles) {
  const std::vector<pid_t> inits = descendants_with_cmdline(node_.pid(), "nsbox-init");
  ASSERT_GE(inits.size(), GetParam() ? 3u : 2u) << "a PID 1 per waiting sandbox (and the fork server's)";
  // What the node's stdio is, whatever kind of file (a pipe, a socket).
  std::set<std::pair<dev_t, ino_t>> node_stdio;
  for (int fd : {0, 1, 2}) {
    struct stat st {};
    if (::stat(("/proc/" + std::to_string(node_.pid()) + "/fd/" + std::to_string(fd)).c_str(), &st) == 0 &&
        !S_ISCHR(st.st_mode))  // /dev/null is everyone's
      node_stdio.insert({st.st_dev, st.st_ino});
  }
  ASSERT_FALSE(node_stdio.empty()) << "the node's log is a file";
  for (pid_t pid : inits) {
    const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
    for (const std::string& fd : dir_entries(fds)) {
      char target[4096];
      const ssize_t n = ::readlink((fds + "/" + fd).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;  // gone with its sandbox
      const std::string file(target, static_cast<size_t>(n));
      struct stat st {};
      if (::stat((fds + "/" + fd).c_str(), &st) == 0) {
        EXPECT_EQ(node_stdio.count({st.st_dev, st.st_ino}), 0u)
            << "PID 1 " << pid << " holds the node's stdio: " << file;
      }
      EXPECT_TRUE(file[0] != '/' || file == "/dev/null") << "PID 1 " << pid << " holds fd " << fd << ": " << file
                                                         << " (the node's log is " << node_.dir() << "/node.log)";
    }
  }
}

TEST_P(Pool, NothingCrossesFromOneRunToTheNext) {
  const std::string leave =
      "import json, os, subprocess, sys, threading, time\n"
      "def main(args):\n"
      "    open('/tmp/left', 'w').write('x')\n"
      "    os.environ['LEFT'] = '1'\n"
      "    json.left = 1\n"
      "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
      "    subprocess.Popen(['sleep', '60'])\n"
      "    return 'left'";
  const std::string look =
      "import json, os, threading\n"
      "def main(args):\n"
      "    procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
      "    return [os.path.exists('/tmp/left'), 'LEFT' in os.environ, hasattr(json, 'left'),\n"
      "            threading.active_count(), len(procs)]";
  for (int i = 0; i < 2; ++i) {
    json first = run_v1(node_, leave);
    ASSERT_EQ(first["return"], "left") << first.dump();
    ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 2)) << node_.log();
    json next = run_v1(node_, look);
    EXPECT_EQ(next["pool"], "warm");
    // No file, no variable, no module state, one thread; PID 1 and the
    // runner only.
    EXPECT_EQ(next["return"], json({false, false, false, 1, 2})) << next.dump();
    ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 2)) << node_.log();
  }
}

TEST_P(Pool, TheRunsClocksStartAtTheRequest) {
  std::this_thread::sleep_for(1500ms);  // the warm sandbox has waited longer than the timeout
  json r = run_v1(node_, "import time\ndef main(args):\n    time.sleep(0.3)\n    return 1", "python", 1);
  EXPECT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["pool"], "warm");
  EXPECT_LT(r["usage"]["wall_ms"].get<int>(), 1000);
  EXPECT_LT(r["usage"]["cpu_ms"].get<int>(), 200) << "the interpreter's start-up is not the run's";
  json t = run_v1(node_, "def main(args):\n    while True: pass", "python", 0.5);
  EXPECT_EQ(t["status"], "timeout") << t.dump();
}

TEST_P(Pool, ABurstRefillsThePool) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      json r = run_v1(node_, "def main(args):\n    return " + std::to_string(i));
      if (r["return"] == i) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 6);
  EXPECT_GE(metric(node_, "nsbox_pool_hits_total") + metric(node_, "nsbox_pool_waits_total") +
                metric(node_, "nsbox_pool_misses_total"),
            6);
  EXPECT_TRUE(wait_metric(node_, "nsbox_pool_idle", 2)) << "the pool did not refill";
  EXPECT_EQ(run_v1(node_, "def main(args):\n    return 1")["pool"], "warm");
}

class PoolReload : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Kinds, PoolReload, ::testing::Bool(), kind_name);

TEST_P(PoolReload, RetiresSandboxesOfAChangedProfile) {
  TempDir dir;
  const std::string forked = GetParam() ? "fork_server: true\n" : "";
  const std::string profile = dir.write("p.yaml", "name: p\nextends: default\nenv: {STAMP: one}\n" + forked);
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  const std::string code = "import os\ndef main(args):\n    return os.environ['STAMP']";
  EXPECT_EQ(run_v1(node, code)["return"], "one");
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  const std::vector<pid_t> zygotes = fork_servers_of(node.pid());
  EXPECT_EQ(zygotes.size(), GetParam() ? 1u : 0u);
  // A run in flight while its profile changes ends normally: a fork server
  // that forked it is torn down only after it.
  json slow;
  std::thread in_flight(
      [&] { slow = run_v1(node, "import time\ndef main(args):\n    time.sleep(1.5)\n    return 's'"); });
  std::this_thread::sleep_for(500ms);
  std::ofstream(profile) << "name: p\nextends: default\nenv: {STAMP: two}\n" << forked;
  ::kill(node.pid(), SIGHUP);
  in_flight.join();
  // At least the idle JavaScript one; the Python one serving the run in
  // flight was not idle, and its replacement may still have been starting.
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_retired_total", 1)) << node.log();
  EXPECT_EQ(slow["return"], "s") << slow.dump();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  json r = run_v1(node, code);
  EXPECT_EQ(r["return"], "two") << r.dump();
  EXPECT_EQ(r["pool"], "warm");
  for (pid_t old : zygotes) {
    for (int i = 0; i < 500 && process_alive_with_cmdline(old, "/opt/nsbox/zygote.py"); ++i)
      std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(process_alive_with_cmdline(old, "/opt/nsbox/zygote.py")) << "the old profile's fork server still runs";
  }
  EXPECT_EQ(fork_servers_of(node.pid()).size(), GetParam() ? 1u : 0u);
}

// tools/build-rootfs swaps the rootfs under a running node (a symlink
// moved to a new tree, the old tree deleted). Runs go to cold sandboxes on
// the new tree at once, not to the warm ones and the fork server started
// on the old (which then kept serving a deleted tree); the old key's pool
// is not refilled meanwhile (its sandboxes could not serve); a rollback
// finds the old key's sandboxes built on the old tree, whatever the name
// pointed at when they started; a reload re-keys the pool on the new tree.
TEST(PoolReload, ARootfsSwappedUnderTheNodeIsUsedAtOnceAndAReloadWarmsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "two trees of one rootfs need bind and overlay mounts";
  // The guest's root is an overlay already: one more under nsbox's own
  // would pass the kernel's stacking depth (2).
  if (in_vm_guest()) GTEST_SKIP() << "tree b's overlay would stack three deep in the guest";
  TempDir dir;
  char real[PATH_MAX];
  ASSERT_NE(::realpath(test_rootfs().c_str(), real), nullptr);
  const std::string a = dir.path() + "/tree.a", b = dir.path() + "/tree.b", marks = dir.path() + "/marks",
                    upper = dir.path() + "/upper", work = dir.path() + "/work";
  for (const std::string& d : {a, b, marks, marks + "/etc", upper, work}) ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  dir.write("marks/etc/nsbox-tree-b", "b\n");
  struct Trees {
    std::vector<std::string> mounted;
    ~Trees() {
      for (const auto& m : mounted) ::umount2(m.c_str(), MNT_DETACH);
    }
  } trees;
  ASSERT_EQ(::mount(real, a.c_str(), nullptr, MS_BIND | MS_REC, nullptr), 0) << std::strerror(errno);
  trees.mounted.push_back(a);
  // Tree b: the same, with /etc/nsbox-tree-b, which tells a run where it is.
  const std::string layers = "lowerdir=" + marks + ":" + real + ",upperdir=" + upper + ",workdir=" + work;
  ASSERT_EQ(::mount("overlay", b.c_str(), "overlay", 0, layers.c_str()), 0) << std::strerror(errno);
  trees.mounted.push_back(b);
  const std::string link = dir.path() + "/rootfs";
  const auto point_at = [&](const char* tree) {
    ::unlink((link + ".new").c_str());
    ASSERT_EQ(::symlink(tree, (link + ".new").c_str()), 0);
    ASSERT_EQ(::rename((link + ".new").c_str(), link.c_str()), 0);  // as build-rootfs does
  };
  point_at("tree.a");
  const std::string profile =
      dir.write("swap.yaml", "name: swap\nextends: default\nfork_server: true\nfilesystem:\n  rootfs: " + link + "\n");
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  const std::string py = "import os\ndef main(args):\n    return os.path.exists('/etc/nsbox-tree-b')";
  const std::string js = "function main(args) { return require('fs').existsSync('/etc/nsbox-tree-b'); }";
  // Where each language's run was, and how it came.
  const auto runs = [&] {
    const json p = run_v1(node, py), j = run_v1(node, js, "javascript");
    return std::vector<json>{p["return"], p["pool"], j["return"], j["pool"]};
  };
  EXPECT_EQ(runs(), (std::vector<json>{false, "warm", false, "warm"}));  // python forked ahead by the fork server
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();

  point_at("tree.b");
  EXPECT_EQ(runs(), (std::vector<json>{true, "cold", true, "cold"})) << "served on or from the old tree";
  EXPECT_NE(node.log().find("no longer resolves to " + a), std::string::npos) << node.log();
  // The old key's idle sandboxes end (an operator, the OOM killer): none
  // is started again on the tree the name now points at.
  // The idle gauge still counts ended or retired sandboxes until the
  // spawner has seen them go, so each wait below is for new sandboxes
  // made ready (refills) rather than for the gauge.
  const double refills_before_kill = metric(node, "nsbox_pool_refills_total");
  ASSERT_GE(refills_before_kill, 2) << node.log();
  for (pid_t init : descendants_with_cmdline(node.pid(), "nsbox-init")) ::kill(init, SIGKILL);
  std::this_thread::sleep_for(1s);

  point_at("tree.a");  // rolled back, no reload
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_refills_total", refills_before_kill + 2)) << node.log();
  EXPECT_EQ(runs(), (std::vector<json>{false, "warm", false, "warm"})) << "a sandbox of tree a's key built on tree b";
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();  // tree a's key full: it refills no more

  const double refills_before_reload = metric(node, "nsbox_pool_refills_total");
  point_at("tree.b");
  ::kill(node.pid(), SIGHUP);
  for (int i = 0; i < 500 && node.log().find("reloaded") == std::string::npos; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_NE(node.log().find("reloaded"), std::string::npos) << node.log();
  // "reloaded" is logged once the spawner was told; it retires tree a's
  // sandboxes and starts tree b's after that.
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_refills_total", refills_before_reload + 2)) << node.log();
  EXPECT_EQ(runs(), (std::vector<json>{true, "warm", true, "warm"})) << "the reload warmed the new tree";
}

TEST(PoolRefill, AtMostTwoSandboxesPerKeyStartAtOnce) {
  NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\nlimits:\n  pool_size: 6\n");
  ASSERT_TRUE(node.ready()) << node.log();
  double most = 0;
  // Refills start at the lowest CPU weight: beside a load test (ctest -j2)
  // they get little CPU until it ends, so the bound is generous.
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline && metric(node, "nsbox_pool_idle") < 12) {
    most = std::max(most, metric(node, "nsbox_pool_starting"));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(metric(node, "nsbox_pool_idle"), 12) << "the pool did not fill\n" << node.log();
  EXPECT_LE(most, 4) << "two keys (Python, JavaScript), at most two starting each";
  EXPECT_GE(most, 1);
}

// CPU seconds a process and its reaped children used (/proc/PID/stat).
double cpu_seconds_with_children(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    ADD_FAILURE() << "process " << pid << " is gone";
    return 0;
  }
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 17 && rest >> field; ++i)
    if (i >= 14) ticks += std::stod(field);  // utime, stime, cutime, cstime
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST(PoolRefill, ASandboxThatCannotStartIsRetriedWithBackoff) {
  TempDir dir;
  const std::string profile =
      dir.write("broken.yaml", "name: broken\nextends: default\nfilesystem:\n  rootfs: /nonexistent-rootfs\n");
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 2\n");
  ASSERT_TRUE(node.ready()) << node.log();
  // The node's own child: a worker the spawner has just forked is named
  // nsbox-spawner too until it names itself, and may be gone a moment later.
  pid_t spawner = 0;
  for (pid_t pid : children_of(node.pid()))
    if (slurp("/proc/" + std::to_string(pid) + "/comm") == "nsbox-spawner\n") spawner = pid;
  ASSERT_GT(spawner, 0);
  std::this_thread::sleep_for(500ms);
  const double before = cpu_seconds_with_children(spawner);
  std::this_thread::sleep_for(3s);
  // Retrying at once, the spawner and its workers would keep a CPU busy.
  EXPECT_LT(cpu_seconds_with_children(spawner) - before, 0.5);
  // The node still answers, with the reason.
  json r = run_v1(node, "def main(args):\n    return 1");
  EXPECT_NE(r.dump().find("nonexistent-rootfs"), std::string::npos) << r.dump();
}

// A profile NAME, the default one whose Python starts with CODE as its
// sitecustomize.py (from dir, mounted at /site), and EXTRA_YAML.
std::string profile_with_sitecustomize(const TempDir& dir, const std::string& name, const std::string& code,
                                       const std::string& extra_yaml = "") {
  dir.write("sitecustomize.py", code);
  return dir.write(name + ".yaml", "name: " + name + "\nextends: default\nenv: {PYTHONPATH: /site}\n" + extra_yaml +
                                       "filesystem:\n  mounts:\n    - {source: " + dir.path() + ", target: /site}\n");
}

// The same for a sandbox that is built but whose runner dies in its
// start-up (here by a sitecustomize.py): it must not count as ready, or it
// would be replaced at once, again and again.
TEST(PoolRefill, ARunnerThatDiesStartingIsRetriedWithBackoff) {
  TempDir dir;
  const std::string profile = profile_with_sitecustomize(dir, "dying", "import os\nos._exit(3)\n");
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 2\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();  // JavaScript's
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(metric(node, "nsbox_pool_refills_total"), 2) << "a Python sandbox that died counted as ready";
  EXPECT_EQ(metric(node, "nsbox_pool_idle"), 2);
  const std::string why = "a warm python sandbox of profile dying ended before it served a run: exit code 3";
  EXPECT_NE(node.log().find(why), std::string::npos) << node.log();
  // With a back-off from 100 ms doubling, a handful of tries in 3 s, not hundreds.
  size_t tries = 0;
  for (size_t at = 0; (at = node.log().find(why, at)) != std::string::npos; at += why.size()) ++tries;
  EXPECT_LE(tries, 8u) << node.log();
}

// A warm sandbox whose interpreter runs out of memory while it starts ends
// and is retried, as any that dies starting: the kernel's OOM killer is
// left on in its cgroup until a run is handed to it (on v1 nsbox then
// turns it off and ends the run itself, and turned on from the start it
// left Node waiting at its limit, never ready, the pool's slot held).
TEST(PoolRefill, AnInterpreterThatRunsOutOfMemoryStartingIsRetried) {
  TempDir dir;
  const std::string profile =  // 64 MiB at every Python start
      profile_with_sitecustomize(dir, "hungry", "held = bytearray(64 << 20)\n", "limits:\n  memory: 32MiB\n");
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  const std::string why = "a warm python sandbox of profile hungry ended before it served a run";
  for (int i = 0; i < 500 && node.log().find(why) == std::string::npos; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_NE(node.log().find(why), std::string::npos) << node.log();
}

// The CPU weight file of the cgroup host process pid is in (v2 cpu.weight,
// v1 cpu.shares).
std::optional<WeightFile> cpu_weight_file_of(pid_t pid) {
  // "ID:CONTROLLERS:PATH" lines of /proc/PID/cgroup: PATH of the v2 line
  // ("0::"), or of the v1 line whose controllers include cpu.
  auto path_in = [](pid_t p, bool v2) -> std::optional<std::string> {
    std::istringstream lines(slurp("/proc/" + (p ? std::to_string(p) : std::string("self")) + "/cgroup"));
    for (std::string line; std::getline(lines, line);) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
      if (v2 ? line.starts_with("0::") : controllers.find(",cpu,") != std::string::npos) return line.substr(b + 1);
    }
    return std::nullopt;
  };
  const CgroupHost& host = launcher().cgroup_host();
  if (auto path = path_in(pid, true); path && host.v2_mount) {
    if (auto weight = weight_file_in(*host.v2_mount + *path)) return weight;
  }
  auto self_dir = host.v1_self_dirs.find("cpu");
  auto path = path_in(pid, false);
  auto own = path_in(0, false);
  if (self_dir == host.v1_self_dirs.end() || !path || !own) return std::nullopt;
  // The hierarchy's mount point: this process's cgroup directory less its path.
  const std::string root =
      *own == "/" ? self_dir->second : self_dir->second.substr(0, self_dir->second.size() - own->size());
  return weight_file_in(root + *path);
}

// A forked refill's PID 1 sets the run up while it holds the key's fork
// server: at the refills' lowest CPU weight, a busy host would hold every
// fork behind it (and fail them by the fork's step deadline). So a forked
// warm sandbox has the default weight, where a started one has the lowest
// (PoolWait.AMissWaitsForASandboxStillStartingAndRaisesItsWeight).
TEST(PoolRefill, AForkedSandboxSetsUpAtTheDefaultCpuWeight) {
  TempDir dir;
  NodeProcess node("tenants:\n  - {name: t, profile: " + pool_profile(dir, true) +
                   "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  const std::vector<pid_t> zygotes = fork_servers_of(node.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  const std::vector<pid_t> forked_inits = children_of(zygotes[0]);
  ASSERT_EQ(forked_inits.size(), 1u) << "the warm Python sandbox's PID 1";
  const auto weight = cpu_weight_file_of(forked_inits[0]);
  ASSERT_TRUE(weight) << "no cpu.weight or cpu.shares for the forked sandbox";
  EXPECT_EQ(first_line(weight->path), weight->default_value);
}

// A tenant whose warm Python sandboxes start up only when the test lets
// them (a file /site/go appears); those that waited for it then end before
// they are ready if /site/die is there too. One that waits says so in its
// /tmp.
std::string gated_profile(const TempDir& dir) {
  return profile_with_sitecustomize(dir, "gated",
                                    "import os, time\n"
                                    "if not os.path.exists('/site/go'):\n"
                                    "    open('/tmp/gated', 'w').close()\n"
                                    "    for _ in range(1200):\n"
                                    "        if os.path.exists('/site/go'): break\n"
                                    "        time.sleep(0.05)\n"
                                    "    if os.path.exists('/site/die'): os._exit(3)\n");
}

// The runner of the node's one warm Python sandbox, once it waits at the
// gate (0 when it never did).
pid_t gated_runner(const NodeProcess& node) {
  for (int i = 0; i < 3000; ++i) {
    const std::vector<pid_t> runners = descendants_with_cmdline(node.pid(), "/opt/nsbox/runner.py");
    if (runners.size() == 1 && ::access(("/proc/" + std::to_string(runners[0]) + "/root/tmp/gated").c_str(), F_OK) == 0)
      return runners[0];
    std::this_thread::sleep_for(10ms);
  }
  ADD_FAILURE() << "no warm Python sandbox waited at the gate\n" << node.log();
  return 0;
}

// A request that finds no warm sandbox ready but one starting waits for it
// rather than start an interpreter beside it (under load two starts per
// answer would take the CPUs), and the rest of that start-up runs at the
// default CPU weight, no longer at the refills' lowest.
TEST(PoolWait, AMissWaitsForASandboxStillStartingAndRaisesItsWeight) {
  TempDir dir;
  NodeProcess node("tenants:\n  - {name: t, profile: " + gated_profile(dir) +
                   "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  const pid_t runner = gated_runner(node);
  ASSERT_GT(runner, 0);
  const auto weight = cpu_weight_file_of(runner);
  ASSERT_TRUE(weight) << "no cpu.weight or cpu.shares for the warm sandbox's runner";
  EXPECT_EQ(first_line(weight->path), weight->lowest) << "a refill starts at the lowest weight";

  json r;
  std::thread request([&] { r = run_v1(node, "def main(args):\n    return 6 * 7"); });
  EXPECT_TRUE(wait_metric(node, "nsbox_pool_waits_total", 1)) << node.log();
  std::string now;
  for (int i = 0; i < 500 && (now = first_line(weight->path)) != weight->default_value; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(now, weight->default_value) << "a start-up a request waits for keeps the lowest weight";
  dir.write("go", "");
  request.join();
  EXPECT_EQ(r["return"], 42) << r.dump();
  EXPECT_EQ(r["pool"], "warm") << r.dump();
  EXPECT_EQ(metric(node, "nsbox_pool_misses_total"), 0) << "it started a cold sandbox instead";
  EXPECT_EQ(metric(node, "nsbox_pool_hits_total"), 0);
}

// The sandbox a request waits for ends before it is ready: the request is
// answered all the same, from a sandbox started for it.
TEST(PoolWait, ARequestWhoseStartingSandboxFailsIsRunCold) {
  TempDir dir;
  NodeProcess node("tenants:\n  - {name: t, profile: " + gated_profile(dir) +
                   "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_GT(gated_runner(node), 0);
  json r;
  std::thread request([&] { r = run_v1(node, "def main(args):\n    return 6 * 7"); });
  EXPECT_TRUE(wait_metric(node, "nsbox_pool_waits_total", 1)) << node.log();
  dir.write("die", "");
  dir.write("go", "");
  request.join();
  EXPECT_EQ(r["return"], 42) << r.dump();
  EXPECT_EQ(r["pool"], "cold") << r.dump();
  // The pool sees only that the sandbox is gone: the node's log says why.
  const std::string why = "a warm python sandbox of profile gated ended before it served a run: exit code 3";
  for (int i = 0; i < 200 && node.log().find(why) == std::string::npos; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(node.log().find(why), std::string::npos) << node.log();
}

// A node with one fork server, stopped, whose ready Python sandbox a first
// request has taken: the refill's fork waits for the stopped zygote, and a
// second request (r, once joined) waits for that refill.
class PoolWaitOnStoppedForkServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(node.ready()) << node.log();
    ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
    zygotes = fork_servers_of(node.pid());
    ASSERT_EQ(zygotes.size(), 1u);
    ASSERT_EQ(::kill(zygotes[0], SIGSTOP), 0);
    json first = run_v1(node, "def main(args):\n    return 1");
    EXPECT_EQ(first["pool"], "warm") << first.dump();
    // Its refill starts a few ms after the take: a request sent before that
    // would be a miss, not a wait.
    ASSERT_TRUE(wait_metric(node, "nsbox_pool_starting", 1)) << node.log();
    request = std::thread([this] { r = run_v1(node, "def main(args):\n    return 6 * 7"); });
    ASSERT_TRUE(wait_metric(node, "nsbox_pool_waits_total", 1)) << node.log();
  }
  void TearDown() override {
    if (!zygotes.empty()) ::kill(zygotes[0], SIGCONT);  // a failed test must not leave the request hanging
    if (request.joinable()) request.join();
  }

  TempDir dir;
  NodeProcess node{"tenants:\n  - {name: t, profile: " + pool_profile(dir, true) +
                   "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n"};
  std::vector<pid_t> zygotes;
  std::thread request;
  json r;
};

// The same with a fork server: a request given a sandbox still being forked
// is, if that one fails, forked again by the fork server (as a miss would
// be), not started cold. The zygote, stopped, makes the fork fail by its
// step timeout; it goes on once the request's own fork waits for it.
TEST_F(PoolWaitOnStoppedForkServer, ARequestWhoseForkedSandboxFailsIsForkedAgain) {
  const std::string failed = "a warm python sandbox of profile forked could not be started";
  for (int i = 0; i < 6000 && node.log().find(failed) == std::string::npos; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(node.log().find(failed), std::string::npos) << node.log();
  ::kill(zygotes[0], SIGCONT);
  request.join();
  EXPECT_EQ(r["return"], 42) << r.dump();
  EXPECT_EQ(r["pool"], "forked") << r.dump();
  EXPECT_EQ(fork_servers_of(node.pid()), zygotes) << "the fork server did not survive the failed fork";
}

// The refill's fork fails, and a fork of the request by the same (dead)
// fork server would too: the request must be started cold, not refused.
TEST_F(PoolWaitOnStoppedForkServer, ARequestWhoseForkServerDiedIsRunCold) {
  ASSERT_EQ(::kill(zygotes[0], SIGKILL), 0);
  request.join();
  EXPECT_EQ(r["return"], 42) << r.dump();
  EXPECT_EQ(r["pool"], "cold") << r.dump();
  EXPECT_NE(node.log().find("could not fork a run, which is started cold instead"), std::string::npos) << node.log();
}

class PoolLeaks : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Kinds, PoolLeaks, ::testing::Bool(), kind_name);

TEST_P(PoolLeaks, ManyPooledRunsLeaveNothingBehind) {
  // 1000 in the release build; fewer where every process is ~50x slower
  // (the VM rig) or the node is instrumented (the ASan build sets ASAN_OPTIONS).
  const int runs = in_vm_guest() ? 40 : std::getenv("ASAN_OPTIONS") ? 300 : 1000;
  TempDir dir;
  NodeProcess node("tenants:\n  - {name: t, profile: " + pool_profile(dir, GetParam()) +
                   "}\ndefault_tenant: t\nlimits:\n  pool_size: 2\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 4)) << node.log();
  const auto orphans_before = orphaned_run_cgroups();
  std::atomic<int> next{0}, failures{0};
  std::vector<std::thread> threads;
  // Refills start up at the lowest CPU weight (kWarmingCpuWeight), so two
  // clients back to back on two CPUs starve them by design: about a
  // quarter of the runs are pooled here, fewer the faster a cold run is.
  // Under emulation (the VM rig) few would finish; there one client leaves
  // a CPU to the refills.
  const int clients = in_vm_guest() ? 1 : 2;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      auto c = node.client();
      for (int i; (i = next++) < runs;) {
        const std::string code = i % 3 == 0 ? "import os\ndef main(args):\n    os.system('sleep 1013 &')\n    return 1"
                                            : "def main(args):\n    return 1";
        auto r = post(c, "/run", request(code, json::object(), 0, i % 2 ? "python" : ""));
        if (!r || r->status != 200 || r->body.find("\"return\": 1") == std::string::npos) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  // With a fork server, a request that finds no warm sandbox is forked too
  // (a miss, but served by the fork server): those count as well.
  const double pooled = metric(node, "nsbox_pool_hits_total") + metric(node, "nsbox_pool_waits_total") +
                        (GetParam() ? metric(node, "nsbox_pool_misses_total") : 0);
  EXPECT_GT(pooled, runs / 8) << "the pool was hardly used";
  const std::vector<pid_t> zygotes = fork_servers_of(node.pid());
  EXPECT_EQ(zygotes.size(), GetParam() ? 1u : 0u);
  // Shutting down retires the idle sandboxes: nothing of any run remains.
  EXPECT_EQ(node.stop(SIGTERM), 0);
  std::set<std::string> orphans = orphaned_run_cgroups();
  for (const auto& o : orphans_before) orphans.erase(o);
  EXPECT_TRUE(orphans.empty()) << "a run cgroup remained: " << *orphans.begin();
  EXPECT_TRUE(dir_entries(node.tmp()).empty()) << "a workspace or artifacts dir remained";
  EXPECT_EQ(slurp("/proc/self/mountinfo").find(node.tmp()), std::string::npos) << "a mount remained";
  EXPECT_TRUE(wait_for_no_process("sleep 1013", 5000)) << "a sandboxed process survived";
  EXPECT_TRUE(host_pids_with_cmdline("nsbox-warm").empty());
  for (pid_t z : zygotes)
    EXPECT_FALSE(process_alive_with_cmdline(z, "/opt/nsbox/zygote.py")) << "a fork server survived";
}

}  // namespace
}  // namespace nsbox::testing
