// The fork server's settings: which runs it may fork, the spec of its own
// sandbox and what it is told for each run. (Its runs are tested for real
// in tests/integration/fork_server_test.cc.)
#include "nsbox/fork_server.h"

#include <sys/socket.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "nsbox/runtime.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

RunSpec python_run() {
  RunSpec spec;
  spec.rootfs = "/";
  spec.workspace = WorkspaceSpec{};
  spec.masks = {"/proc/kcore", "/sys/firmware"};
  spec.limits.wall_time = std::chrono::seconds(30);
  spec.limits.cpu_time = std::chrono::seconds(30);
  spec.limits.open_files = 256;
  RunSpec exec = exec_spec(spec, Language::kPython);
  exec.stdin_data = "{}";
  return exec;
}

TEST(ForkServer, ForksPythonAndJavaScriptAgentRunsOnly) {
  EXPECT_EQ(fork_server_refusal(python_run()), "");
  RunSpec js = exec_spec(python_run(), Language::kJavaScript);
  EXPECT_EQ(fork_server_refusal(js), "");
  RunSpec shell = python_run();
  shell.argv = {"/bin/sh", "-c", "true"};
  EXPECT_EQ(fork_server_refusal(shell), "the fork server runs Python and JavaScript only");
  RunSpec egress = python_run();
  egress.egress = EgressPolicy{};
  EXPECT_NE(fork_server_refusal(egress).find("egress"), std::string::npos);
  RunSpec inputs = python_run();
  inputs.workspace->inputs.push_back({"/etc/hostname", "h"});
  EXPECT_NE(fork_server_refusal(inputs).find("input files"), std::string::npos);
}

TEST(ForkServer, ItsOwnSandboxKeepsNoRunState) {
  RunSpec run = python_run();
  run.limits.stderr_bytes = 0;  // the profile's, for its runs
  RunSpec z = fork_server_spec(run, 42);
  EXPECT_EQ(z.limits.stderr_bytes, kForkServerOutputBytes) << "the zygote's warnings would be cut";
  EXPECT_EQ(z.argv, (std::vector<std::string>{run.argv[0], kForkServerScript}));
  // Node's zygote runs V8 single-threaded: a forked run keeps only the
  // thread that forked it.
  EXPECT_EQ(fork_server_spec(exec_spec(run, Language::kJavaScript), 42).argv,
            (std::vector<std::string>{"node", "--single-threaded", kNodeForkServerScript}));
  EXPECT_EQ(z.seccomp.kind, SeccompChoice::kForkServer);
  EXPECT_EQ(z.fd3_socket, 42);
  EXPECT_FALSE(z.capture_fd3);
  EXPECT_FALSE(z.mask_proc) << "a run cannot mount a /proc of its own under a masked one";
  EXPECT_FALSE(run.makes_runs);
  EXPECT_TRUE(z.makes_runs) << "its namespace would cap what all its runs together may charge through it";
  EXPECT_FALSE(z.workspace) << "each run gets a workspace of its own";
  EXPECT_FALSE(z.stdin_data);
  EXPECT_EQ(z.limits.wall_time.count(), 0) << "the fork server outlives any one run";
  EXPECT_EQ(z.limits.cpu_time.count(), 0);
  // The workspace path must exist in its view for runs to mount on.
  ASSERT_FALSE(z.tmpfs.empty());
  EXPECT_EQ(z.tmpfs.back().target, run.workspace->inside_path);
  EXPECT_EQ(z.limits.cgroup.memory_bytes, run.limits.cgroup.memory_bytes);
  EXPECT_EQ(z.env, run.env);
}

TEST(ForkServer, EachRunIsToldItsFreshMountsMasksLimitsAndFilter) {
  const RunSpec run = python_run();
  SeccompProgram program = SeccompProgram::default_policy();
  std::vector<RlimitSetting> limits = {
      {RLIMIT_NOFILE, {256, 256}}, {RLIMIT_CORE, {0, 0}}, {RLIMIT_STACK, {RLIM_INFINITY, RLIM_INFINITY}}};
  auto j = nlohmann::json::parse(fork_request(run, limits, program));
  std::vector<std::string> tmpfs;
  for (const auto& t : j["tmpfs"]) tmpfs.push_back(t["target"]);
  EXPECT_NE(std::find(tmpfs.begin(), tmpfs.end(), "/tmp"), tmpfs.end());
  EXPECT_NE(std::find(tmpfs.begin(), tmpfs.end(), "/dev/shm"), tmpfs.end());
  EXPECT_EQ(j["workspace"]["path"], run.workspace->inside_path);
  EXPECT_EQ(j["workspace"]["inodes"], 16384 + run.workspace->max_artifacts) << "as a started run's workspace";
  // Only /proc's masks: the others come from the fork server's own view.
  for (const auto& m : j["proc_mask_files"]) EXPECT_EQ(m.get<std::string>().rfind("/proc/", 0), 0u) << m;
  for (const auto& m : j["proc_mask_dirs"]) EXPECT_EQ(m.get<std::string>().rfind("/proc/", 0), 0u) << m;
  EXPECT_NE(j["proc_mask_dirs"].dump().find("/proc/sys"), std::string::npos);
  EXPECT_EQ(j["proc_mask_files"].dump().find("/sys/firmware"), std::string::npos);
  EXPECT_EQ(j["rlimits"][0], nlohmann::json({RLIMIT_NOFILE, 256, 256}));
  EXPECT_EQ(j["rlimits"][2], nlohmann::json({RLIMIT_STACK, -1, -1})) << "Python's RLIM_INFINITY";
  using array = nlohmann::json::array_t;
  EXPECT_EQ(j["quotas"], nlohmann::json(array{{"max_inotify_instances", 8},
                                              {"max_inotify_watches", 8192},
                                              {"max_fanotify_groups", 0},
                                              {"max_fanotify_marks", 0},
                                              {"max_user_namespaces", 0}}));
  EXPECT_EQ(j["seccomp"].get<std::string>().size(), program.instruction_count() * sizeof(sock_filter) * 2);
  EXPECT_EQ(j["notify"], true);
  EXPECT_EQ(j["hostname"], run.hostname);
  EXPECT_EQ(j["cwd"], run.cwd);
}

// What a node checks when it loads a profile with fork_server: the largest
// request its runs make on any host, the whole seccomp program and the
// rlimits standing in for missing controllers included.
TEST(ForkServer, TheLargestRequestIsMeasuredWithItsFilterAndStandIns) {
  RunSpec run = python_run();
  run.limits.cgroup.memory_bytes = 64 << 20;
  run.limits.cgroup.pids = 64;
  const SeccompProgram program = SeccompProgram::default_policy();
  std::vector<RlimitSetting> rlimits = rlimits_for(run.limits);
  // Not the core limit, which a forked run inherits from its fork server.
  std::erase_if(rlimits, [](const RlimitSetting& r) { return r.resource == RLIMIT_CORE; });
  const size_t without_standins = 1 + fork_request(run, rlimits, program).size();
  rlimits.push_back({RLIMIT_DATA, {64 << 20, 64 << 20}});
  rlimits.push_back({RLIMIT_NPROC, {64, 64}});
  // And what the kernel charges to host root, which each run bounds itself.
  const std::vector<RlimitSetting> charged = charged_rlimits();
  ASSERT_EQ(charged.size(), 2u);
  EXPECT_EQ(charged[0].resource, RLIMIT_MSGQUEUE);
  EXPECT_EQ(charged[0].value.rlim_max, 0u);
  EXPECT_EQ(charged[1].resource, RLIMIT_SIGPENDING);
  EXPECT_EQ(charged[1].value.rlim_max, kRunPendingSignals);
  rlimits.insert(rlimits.end(), charged.begin(), charged.end());
  EXPECT_EQ(largest_fork_request_bytes(run), 1 + fork_request(run, rlimits, program).size());
  EXPECT_GT(largest_fork_request_bytes(run), without_standins);
  run.seccomp = {SeccompChoice::kStrict, {}};
  EXPECT_EQ(largest_fork_request_bytes(run), 1 + fork_request(run, rlimits, SeccompProgram::strict_policy()).size());
  run.env.emplace_back("BIG", std::string(kMaxForkRequestBytes, 'x'));
  EXPECT_GT(largest_fork_request_bytes(run), kMaxForkRequestBytes);
}

// Whether a message of `bytes` goes through a fork server's socket pair
// (SEQPACKET, its send buffer raised as nsbox raises it).
bool fork_request_fits(size_t bytes) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
  const UniqueFd a(sv[0]), b(sv[1]);
  make_room_for_a_fork_request(a.get());
  const std::string message(bytes, 'F');
  return ::send(a.get(), message.data(), message.size(), MSG_DONTWAIT) == static_cast<ssize_t>(bytes);
}

// What the node lets a profile's fork requests be is what goes through:
// a profile refused for less, or every forked run failing with EMSGSIZE.
TEST(ForkRequestCapacity, IsWhatASocketMadeForForkRequestsCarries) {
  const size_t capacity = fork_request_capacity();
  ASSERT_GT(capacity, 0u);
  EXPECT_LE(capacity, kMaxForkRequestBytes);
  EXPECT_TRUE(fork_request_fits(capacity)) << capacity;
}

}  // namespace
}  // namespace nsbox
