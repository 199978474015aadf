// The node's audit log as a security team reads it: the node's own life
// (start, reloads, stop) on record, a run on record from its start, no
// run while the log cannot be written, and refusals recorded without the
// credentials or inputs a client sent.
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixture.h"
#include "node_process.h"
#include "nsbox/digest.h"
#include "nsbox/health.h"

namespace nsbox::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kToken = "audit-token-0123456789abcdef";

std::string tenants_config(const std::string& audit_log, const std::string& more_tenants = "") {
  return std::string("tenants:\n  - {name: acme, token: ") + kToken + ", profile: default}\n" + more_tenants +
         "limits: {max_concurrent: 1, queue_depth: 4, grace_period: 1s}\naudit_log: " + audit_log + "\n";
}

// Every line of the audit log, parsed; a line that is not JSON is kept as
// a string.
std::vector<json> records_of(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      out.push_back(line);
    }
  }
  return out;
}

std::vector<json> records_of(const std::string& path, const std::string& event) {
  std::vector<json> out;
  for (json& r : records_of(path))
    if (r.is_object() && r["event"] == event) out.push_back(std::move(r));
  return out;
}

// Until the log holds at least n records of event (10 s).
std::vector<json> wait_for_records(const std::string& path, const std::string& event, size_t n) {
  std::vector<json> found;
  for (int i = 0; i < 500 && (found = records_of(path, event)).size() < n; ++i) std::this_thread::sleep_for(20ms);
  return found;
}

httplib::Result run_as_acme(const NodeProcess& node, const std::string& code = "def main(args):\n    return 7") {
  return post(node.client(), "/run", request(code), {{"Authorization", std::string("Bearer ") + kToken}});
}

TEST(NodeAudit, StartReloadsAndStopAreOnRecordAndAReloadCannotTurnTheLogOff) {
  NodeProcess node(tenants_config("audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  const std::string path = node.dir() + "/audit.log";
  const std::vector<json> started = wait_for_records(path, "node_started", 1);
  ASSERT_EQ(started.size(), 1u) << slurp(path);
  EXPECT_EQ(started[0]["pid"], node.pid());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(started[0]["hostname"], host);
  EXPECT_EQ(started[0]["config"], node.config_path());
  EXPECT_EQ(started[0]["listeners"], json::parse(R"([{"address": "127.0.0.1:)" + std::to_string(node.port()) +
                                                 R"(", "language": null, "anonymous_tenant": null}])"));
  EXPECT_EQ(started[0]["metrics_token"], false);
  ASSERT_EQ(started[0]["tenants"].size(), 1u);
  EXPECT_EQ(started[0]["tenants"][0]["name"], "acme");
  // Which token, never the token: a token's change is on record.
  EXPECT_EQ(started[0]["tenants"][0]["token_sha256"], sha256_hex(kToken).substr(0, 16));
  EXPECT_EQ(slurp(path).find(kToken), std::string::npos);
  EXPECT_EQ(started[0]["tenants"][0]["profile"], "default");
  EXPECT_EQ(started[0]["tenants"][0]["profile_sha256"].get<std::string>().size(), 64u);

  node.write_config(
      tenants_config("audit.log", "  - {name: beta, token: beta-token-0123456789abcdef, profile: python}\n"));
  ASSERT_EQ(::kill(node.pid(), SIGHUP), 0);
  std::vector<json> reloads = wait_for_records(path, "reload", 1);
  ASSERT_EQ(reloads.size(), 1u) << slurp(path);
  EXPECT_EQ(reloads[0]["outcome"], "applied");
  EXPECT_EQ(reloads[0]["tenants"].size(), 2u) << reloads[0];

  node.write_config("tenants: [\n");
  ASSERT_EQ(::kill(node.pid(), SIGHUP), 0);
  reloads = wait_for_records(path, "reload", 2);
  ASSERT_EQ(reloads.size(), 2u) << slurp(path);
  EXPECT_EQ(reloads[1]["outcome"], "refused");
  EXPECT_FALSE(reloads[1]["error"].get<std::string>().empty());

  // Without audit_log the config is valid, but a reload may not stop the
  // trail: refused, and the runs after it are still on record.
  node.write_config("tenants:\n  - {name: acme, token: " + std::string(kToken) + ", profile: default}\n");
  ASSERT_EQ(::kill(node.pid(), SIGHUP), 0);
  reloads = wait_for_records(path, "reload", 3);
  ASSERT_EQ(reloads.size(), 3u) << slurp(path);
  EXPECT_EQ(reloads[2]["outcome"], "refused");
  EXPECT_NE(reloads[2]["error"].get<std::string>().find("audit_log was removed"), std::string::npos) << reloads[2];
  auto r = run_as_acme(node);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(wait_for_records(path, "run", 1).size(), 1u) << slurp(path);

  EXPECT_EQ(node.stop(SIGTERM), 0) << node.log();
  const std::vector<json> all = records_of(path);
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[all.size() - 2]["event"], "node_stopping");
  EXPECT_EQ(all[all.size() - 2]["cause"], "SIGTERM");
  EXPECT_EQ(all.back()["event"], "node_stopped");
  // Every record, of every kind, names the node that wrote it, third
  // after its time and event; another start of it is another node.
  const json node_id = started[0]["node"];
  ASSERT_TRUE(node_id.is_string() && node_id.get<std::string>().size() == 16) << started[0];
  std::istringstream lines(slurp(path));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::ordered_json::parse(line);
    EXPECT_EQ(record["node"], node_id) << line;
    EXPECT_EQ(std::next(record.begin(), 2).key(), "node") << line;
  }
  NodeProcess again(tenants_config("audit.log"));
  ASSERT_TRUE(again.ready()) << again.log();
  const std::vector<json> restarted = wait_for_records(again.dir() + "/audit.log", "node_started", 1);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_NE(restarted[0]["node"], node_id);
}

// A node killed mid-run cannot write the run's record; its start is there.
TEST(NodeAudit, ARunTheNodeDoesNotLiveToFinishIsOnRecord) {
  NodeProcess node(tenants_config("audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  std::thread client([&] { (void)run_as_acme(node, "import time\ndef main(args):\n    time.sleep(60)"); });
  ASSERT_TRUE(node.wait_running(1)) << node.log();
  const std::string path = node.dir() + "/audit.log";
  const std::vector<json> started = wait_for_records(path, "run_started", 1);
  const std::vector<pid_t> spawner = children_of(node.pid());
  ::kill(node.pid(), SIGKILL);
  node.wait_exit();
  client.join();
  // The spawner tears the run down once the node is gone; then the test's
  // directory is free to remove.
  for (int i = 0; i < 1500 && !spawner.empty() && ::kill(spawner[0], 0) == 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(started.size(), 1u) << slurp(path);
  EXPECT_EQ(started[0]["tenant"], "acme");
  EXPECT_EQ(started[0]["language"], "python");
  EXPECT_EQ(started[0]["code_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(started[0]["run_id"].get<std::string>().size(), 32u);
  // The tree the run was made of, not the name that points to it (which
  // tools/build-rootfs moves to a new tree).
  EXPECT_EQ(started[0]["rootfs"], std::filesystem::canonical(NSBOX_DEFAULT_ROOTFS).string()) << started[0];
  EXPECT_TRUE(records_of(path, "run").empty()) << slurp(path);
}

// Without its spawner no run can start: the node says so on /health and
// stops with exit 1 (for the service manager to start it again) rather
// than answer every run with an error.
TEST(NodeLifecycle, ANodeWhoseSpawnerDiesStopsWithExit1AndSaysWhy) {
  NodeProcess node(tenants_config("audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  pid_t spawner = -1;
  for (pid_t child : children_of(node.pid()))
    if (slurp("/proc/" + std::to_string(child) + "/comm") == "nsbox-spawner\n") spawner = child;
  ASSERT_GT(spawner, 0) << "no nsbox-spawner among the node's children";
  ASSERT_EQ(::kill(spawner, SIGKILL), 0);
  // Dead, not dying: a request that reached it before is a run that failed.
  for (int i = 0; i < 500; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(2))) {
    const std::string stat = slurp("/proc/" + std::to_string(spawner) + "/stat");
    if (stat.empty() || stat.find(") Z ") != std::string::npos) break;
  }
  // Requests from then on are refused as the node's stop (it learns of the
  // death at once), never run into a failure (a 500 and a run on record).
  std::string answers;
  for (int i = 0; i < 20; ++i) {
    auto c = node.client();
    auto r =
        post(c, "/run", request("def main(args):\n    return 1"), {{"Authorization", std::string("Bearer ") + kToken}});
    if (!r) continue;  // no longer listening
    answers += std::to_string(r->status) + " " + r->body + "\n";
    EXPECT_EQ(r->status, 503) << r->body;
  }
  EXPECT_EQ(node.wait_exit(), 1) << node.log();
  EXPECT_NE(node.log().find("the spawner (pid " + std::to_string(spawner) + ") has died"), std::string::npos)
      << node.log();
  const std::vector<json> stopping = records_of(node.dir() + "/audit.log", "node_stopping");
  ASSERT_EQ(stopping.size(), 1u) << slurp(node.dir() + "/audit.log");
  EXPECT_EQ(stopping[0]["cause"], "spawner_died");
  EXPECT_EQ(records_of(node.dir() + "/audit.log").back()["event"], "node_stopped");
  EXPECT_TRUE(records_of(node.dir() + "/audit.log", "run_started").empty()) << answers;
}

// The node's spawner, and its children named comm (nsbox-warm: the pool's
// workers, nsbox-worker: a cold run's).
pid_t spawner_of(const NodeProcess& node) {
  for (pid_t child : children_of(node.pid()))
    if (slurp("/proc/" + std::to_string(child) + "/comm") == "nsbox-spawner\n") return child;
  return -1;
}

std::vector<pid_t> spawner_children(const NodeProcess& node, const std::string& comm) {
  std::vector<pid_t> found;
  for (pid_t child : children_of(spawner_of(node)))
    if (slurp("/proc/" + std::to_string(child) + "/comm") == comm + "\n") found.push_back(child);
  return found;
}

// The run cgroups and workspaces a worker made (they are named after it).
std::vector<std::string> what_a_worker_holds(const NodeProcess& node, pid_t worker) {
  const std::string owner = "run-" + std::to_string(worker) + "-";
  std::vector<std::string> found;
  for (const auto& name : dir_entries(node.tmp()))
    if (name.find(owner) != std::string::npos) found.push_back(node.tmp() + "/" + name);
  const CgroupHost& host = launcher().cgroup_host();
  std::vector<std::string> parents;
  if (host.v2_mount) parents.push_back(host.v2_self_dir + "/nsbox");
  for (const auto& [controller, dir] : host.v1_self_dirs) parents.push_back(dir + "/nsbox");
  for (const auto& parent : parents)
    for (const auto& name : dir_entries(parent))
      if (name.rfind(owner, 0) == 0) found.push_back(parent + "/" + name);
  return found;
}

// A warm sandbox's worker killed (an operator, the OOM killer) cannot remove
// its run's cgroups and workspace; the spawner that reaps it does, while
// the node goes on serving (they used to stay until the node's next start).
TEST(NodeLifecycle, WhatAKilledWorkerHeldIsRemovedWhileTheNodeServes) {
  NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n");
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
  const std::vector<pid_t> warm = spawner_children(node, "nsbox-warm");
  ASSERT_FALSE(warm.empty()) << "no warm sandbox's worker";
  const pid_t worker = warm[0];
  ASSERT_FALSE(what_a_worker_holds(node, worker).empty()) << "the worker holds no cgroup or workspace to leave behind";
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  for (int i = 0; i < 250 && !what_a_worker_holds(node, worker).empty(); ++i) std::this_thread::sleep_for(20ms);
  for (const auto& path : what_a_worker_holds(node, worker))
    ADD_FAILURE() << path << " outlived the worker that made it";
  auto r = post(node.client(), "/run", request("def main(args):\n    return 3"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "{\"return\": 3, \"error\": null}");
}

// A worker that never answers (stopped here; in life a bug that wedges
// it) used to hold its request, and its share of the node, for ever. The
// node waits for the run's time limit and limits.answer_grace, has the
// spawner kill the worker, and answers 500 so that a gateway may retry
// elsewhere; nothing of the run is left, and the node serves on. Cold and
// warm: the spawner knows either worker by its job's socket.
class NodeLifecycleStuckWorker : public ::testing::TestWithParam<bool> {};

TEST_P(NodeLifecycleStuckWorker, IsKilledAfterTheRunsTimeLimitAndTheGrace) {
  const bool warm = GetParam();
  TempDir dir;
  const std::string profile =
      dir.write("short.yaml", "name: short\nextends: default\nlimits:\n  wall_time: 10s\n  cpu_time: 10s\n");
  NodeProcess node("tenants:\n  - {name: t, profile: " + profile +
                   "}\ndefault_tenant: t\nlimits:\n  answer_grace: 5s\n" + (warm ? "  pool_size: 1\n" : ""));
  ASSERT_TRUE(node.ready()) << node.log();
  std::vector<pid_t> stopped;
  if (warm) {
    ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();
    stopped = spawner_children(node, "nsbox-warm");  // the job goes to the Python one
    for (pid_t worker : stopped) ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  }
  const std::string code =
      "import subprocess, time\ndef main(args):\n    subprocess.Popen(['sleep', '1017'])\n    time.sleep(60)\n";
  std::optional<std::pair<int, std::string>> answer;  // status, body
  const auto start = std::chrono::steady_clock::now();
  std::thread client([&] {
    httplib::Client c = node.client();
    c.set_read_timeout(60, 0);  // the old node never answered
    if (auto r = post(c, "/run", request(code))) answer.emplace(r->status, r->body);
  });
  if (!warm) {
    for (int i = 0; i < 500 && host_pids_with_cmdline("sleep 1017").empty(); ++i) std::this_thread::sleep_for(20ms);
    stopped = spawner_children(node, "nsbox-worker");
    EXPECT_EQ(stopped.size(), 1u) << "the cold run's worker";
    for (pid_t worker : stopped) ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  }
  client.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(answer) << "no answer within 60 s\n" << node.log();
  EXPECT_EQ(answer->first, 500);
  EXPECT_EQ(answer->second,
            "{\"return\": null, \"error\": \"The sandbox worker did not answer within 5s of the run's time limit: it "
            "was killed\"}");
  EXPECT_GE(seconds, 15.0) << "not before the time limit and the grace";
  EXPECT_NE(node.log().find("killing worker"), std::string::npos) << node.log();
  // The worker that had the job is gone (killed, then reaped by the
  // spawner) while still stopped; the pool's other one goes on.
  auto gone = [&] {
    return std::find_if(stopped.begin(), stopped.end(), [](pid_t worker) { return ::kill(worker, 0) != 0; });
  };
  for (int i = 0; i < 250 && gone() == stopped.end(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_NE(gone(), stopped.end()) << "no stopped worker was killed\n" << node.log();
  const pid_t killed = *gone();
  for (pid_t worker : stopped) ::kill(worker, SIGCONT);
  // Its run goes with it: its processes, cgroups, workspace.
  for (int i = 0;
       i < 500 && (!host_pids_with_cmdline("sleep 1017").empty() || !what_a_worker_holds(node, killed).empty()); ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(host_pids_with_cmdline("sleep 1017").empty()) << "the run's process outlived its killed worker";
  for (const auto& path : what_a_worker_holds(node, killed)) ADD_FAILURE() << path << " outlived the killed worker";
  auto r = post(node.client(), "/run", request("def main(args):\n    return 3"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "{\"return\": 3, \"error\": null}");
}

INSTANTIATE_TEST_SUITE_P(ColdAndWarm, NodeLifecycleStuckWorker, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) { return param.param ? "Warm" : "Cold"; });

// Nor does such a worker hold up the node's stop: its run is cancelled at
// the end of grace_period, and its worker killed answer_grace later.
TEST(NodeLifecycle, AWorkerThatDoesNotAnswerDoesNotHoldUpTheNodesStop) {
  NodeProcess node(
      "tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\nlimits:\n  grace_period: 1s\n  answer_grace: "
      "5s\n");
  ASSERT_TRUE(node.ready()) << node.log();
  std::optional<std::pair<int, std::string>> answer;
  std::thread client([&] {
    if (auto r = post(node.client(), "/run", request("import time\ndef main(args):\n    time.sleep(60)\n")))
      answer.emplace(r->status, r->body);
  });
  ASSERT_TRUE(node.wait_running(1)) << node.log();
  // Admitted before its worker is forked and named: looked for until then.
  std::vector<pid_t> workers;
  for (int i = 0; i < 500 && workers.empty(); ++i) {
    workers = spawner_children(node, "nsbox-worker");
    if (workers.empty()) std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(::kill(workers[0], SIGSTOP), 0);
  const std::optional<int> code = node.stop_within(SIGTERM, 30s);
  client.join();
  ASSERT_TRUE(code.has_value()) << "the node did not stop within 30 s\n" << node.log();
  EXPECT_EQ(*code, 0) << node.log();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->first, 500);
  EXPECT_EQ(answer->second,
            "{\"return\": null, \"error\": \"The sandbox worker did not answer within 5s of the run's cancel: it was "
            "killed\"}");
  EXPECT_TRUE(dir_entries(node.tmp()).empty());
}

// Runs that fail for a reason the node could not see when it started
// (here the directory its workspaces are made in is gone) turn /health
// to 503 degraded, naming why, so that a balancer sends runs elsewhere;
// one run that gets a sandbox turns it back.
TEST(NodeLifecycle, RunsThatGetNoSandboxTurnHealthDegradedUntilOneGetsOne) {
  NodeProcess node("tenants:\n  - {name: t, profile: default}\ndefault_tenant: t\n");
  ASSERT_TRUE(node.ready()) << node.log();
  auto health = [&] {
    auto r = node.client().Get("/health");
    return r ? std::to_string(r->status) + " " + r->body : std::string("no answer");
  };
  ASSERT_EQ(health(), "200 {\"status\": \"ok\"}");
  const std::string away = node.tmp() + ".away";
  ASSERT_EQ(::rename(node.tmp().c_str(), away.c_str()), 0);
  { std::ofstream(node.tmp()) << "not a directory"; }
  for (uint32_t i = 1; i <= SandboxHealth::kFailuresInARow; ++i) {
    auto r = post(node.client(), "/run", request("def main(args):\n    return 3"));
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("The sandbox could not be started"), std::string::npos) << r->body;
    EXPECT_EQ(r->status, 500) << "the node's failure, not the code's: a gateway retries it elsewhere";
    if (i < SandboxHealth::kFailuresInARow) {
      EXPECT_EQ(health().substr(0, 3), "200") << i;
    }
  }
  const std::string degraded = health();
  EXPECT_EQ(degraded,
            "503 {\"status\": \"degraded\", \"reason\": \"the last 5 runs got no sandbox; the node's log says why\"}")
      << "/health answers anyone: no tenant, path or error text";
  EXPECT_EQ(metric(node, "nsbox_sandbox_failures_total"), 5);
  // The log says why, naming the tenant and what failed.
  EXPECT_NE(node.log().find("the last 5 runs got no sandbox (the last: tenant t: The sandbox could not be started: "),
            std::string::npos)
      << node.log();
  EXPECT_NE(node.log().find(node.tmp()), std::string::npos) << node.log();

  ASSERT_EQ(::unlink(node.tmp().c_str()), 0);
  ASSERT_EQ(::rename(away.c_str(), node.tmp().c_str()), 0);
  auto r = post(node.client(), "/run", request("def main(args):\n    return 3"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "{\"return\": 3, \"error\": null}");
  EXPECT_EQ(health(), "200 {\"status\": \"ok\"}");
  EXPECT_NE(node.log().find("runs get sandboxes again"), std::string::npos) << node.log();
}

// A tmpfs mounted for as long as it lives.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& dir, const char* size) : dir_(dir) {
    ok_ = ::mkdir(dir.c_str(), 0700) == 0 &&
          ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, (std::string("size=") + size).c_str()) == 0;
  }
  ~SmallFilesystem() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;
  bool ok() const { return ok_; }

 private:
  std::string dir_;
  bool ok_ = false;
};

// Writes a file until the filesystem has no room left.
void fill(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr) << std::strerror(errno);
  const std::string block(4096, 'f');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
  }
  std::fclose(f);
}

// No run without its record: with its disk full the node refuses runs and
// says why on /health and in its metrics; with room again, the log says
// how many records were lost and runs go on.
TEST(NodeAudit, AFullDiskStopsRunsUntilTheLogTakesRecordsAgain) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  TempDir scratch;
  const std::string logs = scratch.path() + "/logs";
  SmallFilesystem small(logs, "64k");
  ASSERT_TRUE(small.ok()) << std::strerror(errno);
  NodeProcess node(tenants_config(logs + "/audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  fill(logs + "/filler");
  // What the log's last page still holds is written; then a record is lost
  // and the next run is refused.
  int refused_after = -1;
  std::string refusal;
  std::vector<std::string> ran;
  for (int i = 0; i < 40 && refused_after < 0; ++i) {
    auto r = run_as_acme(node);
    ASSERT_TRUE(r);
    if (r->status == 503) {
      refused_after = i;
      refusal = r->body;
    } else {
      ASSERT_EQ(r->status, 200) << r->body;
      ran.push_back(r->get_header_value("X-Nsbox-Run-Id"));
    }
  }
  ASSERT_GE(refused_after, 0) << "runs went on with the audit log's disk full";
  EXPECT_NE(refusal.find("audit log cannot be written (No space left on device)"), std::string::npos) << refusal;
  auto health = node.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(health->body,
            R"({"status": "degraded", "reason": "the audit log cannot be written: No space left on device"})")
      << "spaced as OPERATIONS.md shows it";
  EXPECT_GE(metric(node, "nsbox_audit_records_lost_total"), 1);
  EXPECT_GE(metric(node, "nsbox_rejected_requests_total{reason=\"audit_unavailable\"}"), 1);

  ASSERT_EQ(::unlink((logs + "/filler").c_str()), 0);
  health = node.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  auto r = run_as_acme(node);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(node.stop(SIGTERM), 0) << node.log();

  const std::vector<json> records = records_of(logs + "/audit.log");
  size_t not_json = 0;
  for (const json& record : records) not_json += record.is_string();
  EXPECT_LE(not_json, 1u) << "at most the one line the full disk cut";
  const std::vector<json> lost = records_of(logs + "/audit.log", "audit_records_lost");
  ASSERT_EQ(lost.size(), 1u) << slurp(logs + "/audit.log");
  EXPECT_GE(lost[0]["count"].get<int>(), 1);
  EXPECT_EQ(lost[0]["error"], "No space left on device");
  // Every run that ran has its start on record (its end may be what was lost).
  std::set<std::string> started;
  for (const json& record : records_of(logs + "/audit.log", "run_started")) started.insert(record["run_id"]);
  for (const std::string& id : ran) EXPECT_TRUE(started.count(id)) << "run " << id << " ran without a record";
  const std::vector<json> runs = records_of(logs + "/audit.log", "run");
  ASSERT_FALSE(runs.empty());
  EXPECT_EQ(runs.back()["run_id"], r->get_header_value("X-Nsbox-Run-Id")) << "the run after the disk had room";
}

// The run's run_started line decides: a run whose start cannot be written
// is not run (here the file may grow by 100 bytes, less than that line).
TEST(NodeAudit, ARunWhoseStartCannotBeWrittenIsNotRun) {
  NodeProcess node(tenants_config("audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  auto r = run_as_acme(node);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string path = node.dir() + "/audit.log";
  ASSERT_EQ(wait_for_records(path, "run", 1).size(), 1u) << slurp(path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const rlimit room{static_cast<rlim_t>(st.st_size) + 100, static_cast<rlim_t>(st.st_size) + 100};
  ASSERT_EQ(::prlimit(node.pid(), RLIMIT_FSIZE, &room, nullptr), 0) << std::strerror(errno);
  r = run_as_acme(node);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("audit log cannot be written (File too large)"), std::string::npos) << r->body;
  EXPECT_FALSE(r->has_header("X-Nsbox-Run-Id")) << "no run was started";
  EXPECT_EQ(records_of(path, "run_started").size(), 1u) << "only the first run's start is whole\n" << slurp(path);
  EXPECT_EQ(metric(node, "nsbox_runs_total{tenant=\"acme\",language=\"python\",status=\"ok\"}"), 1);
}

// What the listener refuses before the node reads a head is on record too;
// no refusal writes a token or a run's inputs, whatever the client sent.
TEST(NodeAudit, RefusalsAreOnRecordWithoutTheCredentialsOrInputsSent) {
  NodeProcess node(tenants_config("audit.log"));
  ASSERT_TRUE(node.ready()) << node.log();
  std::vector<json> told;  // each answer's body
  auto send_raw = [&](const std::string& text) {
    const int s = connect_loopback(node.port());
    if (s < 0) return std::string();
    (void)::send(s, text.data(), text.size(), MSG_NOSIGNAL);
    timeval tv{10, 0};
    ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string answer = read_answer(s);
    ::close(s);
    const size_t body = answer.find("\r\n\r\n");
    told.push_back(body == std::string::npos ? json() : json::parse(answer.substr(body + 4), nullptr, false));
    return answer.substr(0, answer.find("\r\n"));
  };
  EXPECT_EQ(send_raw("GET /health HTTP/1.1\nHost: x\n\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(send_raw("GET /health HTTP/1.1\r\nX: " + std::string(40000, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(send_raw("GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(send_raw(std::string("POST /run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kToken +
                     "\x01\r\nContent-Length: 2\r\n\r\n{}"),
            "HTTP/1.1 400 Bad Request");
  const std::string body =
      R"({"code": "def main(a): return 1", "inputs": {"x": "MRN 5551234)" + std::string("\x01") + "\"}}";
  auto r = post(node.client(), "/run", body, {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;

  const std::string path = node.dir() + "/audit.log";
  const std::vector<json> refused = wait_for_records(path, "refused", 5);
  ASSERT_EQ(refused.size(), 5u) << slurp(path);
  EXPECT_EQ(refused[0]["status"], 400);
  EXPECT_TRUE(refused[0]["method"].is_null()) << "cut before its head was read";
  EXPECT_EQ(refused[0]["client"], "127.0.0.1");
  EXPECT_EQ(refused[1]["status"], 431);
  for (int i : {0, 1}) EXPECT_EQ(refused[i]["message"], told.at(i)["error"]) << "what the client was told";
  EXPECT_EQ(refused[2]["status"], 404);
  EXPECT_EQ(refused[2]["path"], "/etc/passwd");
  EXPECT_EQ(refused[3]["status"], 400);
  EXPECT_EQ(refused[4]["status"], 400);
  EXPECT_EQ(refused[4]["tenant"], "acme");
  const std::string text = slurp(path);
  EXPECT_EQ(text.find("0123456789abcdef"), std::string::npos) << "a token in the log:\n" << text;
  EXPECT_EQ(text.find("5551234"), std::string::npos) << "a run's input in the log:\n" << text;
}

}  // namespace
}  // namespace nsbox::testing
