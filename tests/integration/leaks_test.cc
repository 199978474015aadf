// After any run, failed or killed, nothing of it remains on the host.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "fixture.h"

namespace nsbox::testing {
namespace {

// This process's runs are named nsbox-run-<pid>-...: other tests may run in
// parallel, so only what this process created is compared.
std::string own_run_prefix() { return "nsbox-run-" + std::to_string(::getpid()) + "-"; }

std::set<std::string> nsbox_temp_entries() {
  std::set<std::string> out;
  for (const auto& name : dir_entries("/tmp"))
    if (name.rfind(own_run_prefix(), 0) == 0) out.insert(name);
  return out;
}

std::vector<std::string> own_mounts() {
  std::vector<std::string> out;
  std::istringstream in(slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);)
    if (line.find(own_run_prefix()) != std::string::npos) out.push_back(line);
  return out;
}

std::set<pid_t> my_children() {
  std::set<pid_t> out;
  for (const auto& name : dir_entries("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = slurp("/proc/" + name + "/stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(close_paren + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == ::getpid()) out.insert(std::stoi(name));
  }
  return out;
}

TEST(Leaks, TwoHundredRunsLeaveNothingBehind) {
  // Warm up the shared Launcher so its one-time state is not counted.
  run({"true"});
  const auto fds_before = dir_entries("/proc/self/fd");
  const std::string mounts_before = slurp("/proc/self/mountinfo");
  ASSERT_TRUE(own_mounts().empty());
  const auto tmp_before = nsbox_temp_entries();
  ASSERT_TRUE(my_children().empty());

  int ok = 0, failed = 0, timed_out = 0, killed = 0;
  for (int i = 0; i < 200; ++i) {
    RunSpec spec = capture_spec({"true"});
    if (i % 2 == 0) spec.workspace = WorkspaceSpec{};  // a workspace (tmpfs as root) in half the runs
    switch (i % 5) {
      case 0:
        spec.argv = {"sh", "-c", "echo x > /tmp/f; echo y > /workspace/out/y 2>/dev/null; sleep 0 & exit 0"};
        break;
      case 1:
        spec.argv = {"no-such-command"};
        break;
      case 2:
        spec.argv = {"sh", "-c", "(setsid sleep 1007 &); sleep 1007"};
        spec.limits.wall_time = std::chrono::milliseconds(50);
        break;
      case 3:
        spec.argv = {"sh", "-c", "kill -KILL $$"};
        break;
      case 4:
        spec.cwd = "/missing";
        break;
    }
    Result r = run_with(spec);
    switch (r.status) {
      case RunStatus::kOk:
        ++ok;
        break;
      case RunStatus::kSetupError:
        ++failed;
        break;
      case RunStatus::kTimeout:
        ++timed_out;
        break;
      case RunStatus::kKilled:
        ++killed;
        break;
      default:
        break;
    }
  }
  EXPECT_EQ(ok, 40);
  EXPECT_EQ(failed, 80);
  EXPECT_EQ(timed_out, 40);
  EXPECT_EQ(killed, 40);

  EXPECT_EQ(dir_entries("/proc/self/fd"), fds_before) << "an fd leaked";
  EXPECT_TRUE(own_mounts().empty()) << "a workspace mount leaked to the host";
  if (::getenv("NSBOX_TEST_SERIAL")) {
    EXPECT_EQ(slurp("/proc/self/mountinfo"), mounts_before) << "a mount leaked to the host";
  }
  EXPECT_EQ(nsbox_temp_entries(), tmp_before) << "a temp entry was left behind";
  EXPECT_TRUE(my_children().empty()) << "a child process remains";
  EXPECT_TRUE(host_pids_with_cmdline("sleep 1007").empty()) << "a sandboxed sleeper survived";
}

}  // namespace
}  // namespace nsbox::testing
