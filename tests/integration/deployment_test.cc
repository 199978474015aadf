// nsbox as the shipped systemd unit runs it: what the unit takes away must
// leave nsbox all it needs.
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fixture.h"
#include "node_process.h"
#include "nsbox/fork_server.h"

namespace nsbox::testing {
namespace {

using json = nlohmann::json;

// The capabilities the unit's CapabilityBoundingSet= keeps, as numbers.
std::vector<cap_value_t> unit_capability_bounding_set() {
  std::ifstream unit(std::string(NSBOX_SOURCE_DIR) + "/packaging/nsbox.service.in");
  std::vector<cap_value_t> kept;
  for (std::string line; std::getline(unit, line);) {
    if (line.rfind("CapabilityBoundingSet=", 0) != 0) continue;
    std::istringstream names(line.substr(line.find('=') + 1));
    for (std::string name; names >> name;) {
      cap_value_t cap;
      EXPECT_EQ(cap_from_name(name.c_str(), &cap), 0) << "not a capability in the unit: " << name;
      kept.push_back(cap);
    }
  }
  return kept;
}

// Drops every capability but kept from the calling process's bounding set
// (in a child before it execs nsbox: no allocation here).
void keep_only(const std::vector<cap_value_t>& kept) {
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    bool keep = false;
    for (cap_value_t k : kept) keep = keep || k == cap;
    if (!keep && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) ::_exit(124);
  }
}

uint64_t mask_of(const std::vector<cap_value_t>& caps) {
  uint64_t mask = 0;
  for (cap_value_t c : caps) mask |= uint64_t{1} << c;
  return mask;
}

// The CapBnd line of /proc/PID/status, as a number.
uint64_t bounding_set_of(pid_t pid) {
  std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("CapBnd:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  return ~uint64_t{0};
}

// The exit code and output (stdout and stderr) of nsbox args, run with a
// bounding set of kept only.
std::pair<int, std::string> nsbox_keeping(const std::vector<cap_value_t>& kept, const std::vector<std::string>& args) {
  return run_cli_merged(args, [&kept] { keep_only(kept); });
}

// The doctor's lines that say warn or FAIL.
std::string warn_and_fail_lines(const std::string& report) {
  std::istringstream in(report);
  std::string lines;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("  warn", 0) == 0 || line.rfind("  FAIL", 0) == 0) lines += line + "\n";
  return lines;
}

// POST /v1/runs as tenant; the parsed answer (null when there is none).
json run_as(const NodeProcess& node, const std::string& tenant, const std::string& code, const std::string& language,
            double timeout = 0) {
  json body = {{"code", code}, {"inputs", json::object()}, {"language", language}};
  if (timeout > 0) body["timeout"] = timeout;
  auto c = node.client();
  auto r = c.Post("/v1/runs", {{"Authorization", "Bearer " + tenant + "-token-0123456789abcdef"}}, body.dump(),
                  "application/json");
  return r ? json::parse(r->body, nullptr, false) : json();
}

// A node and `nsbox run` under the unit's bounding set: cold, warm, forked
// and egress runs, a run killed at its timeout, a clean stop, nothing left.
// A capability nsbox comes to need and the unit lacks fails here, not on
// an operator's host (where every run would fail).
TEST(Deployment, TheUnitsCapabilityBoundingSetLeavesNsboxWhatItNeeds) {
  const std::vector<cap_value_t> kept = unit_capability_bounding_set();
  ASSERT_FALSE(kept.empty()) << "no CapabilityBoundingSet= in packaging/nsbox.service.in";
  ASSERT_EQ(mask_of(kept) & ~bounding_set_of(::getpid()), 0u) << "this test runs without a capability the unit keeps";
  TempDir dir;
  // An audit log another user owns, not yet 0600 (as a logrotate rule's
  // `create 0640 syslog adm` leaves it): the node makes it 0600 at start.
  const std::string audit_log = dir.write("audit.log", "");
  ASSERT_EQ(::chown(audit_log.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(audit_log.c_str(), 0640), 0);
  const std::string forked = dir.write("forked.yaml", "name: forked\nextends: default\nfork_server: true\n");
  const std::string egress = dir.write("egress.yaml",
                                       "name: egress\nextends: default\nnetwork:\n  mode: egress\n  allow:\n    - "
                                       "{host: api.example.com, ports: [443]}\n");
  NodeProcess node(
      "tenants:\n  - {name: plain, token: plain-token-0123456789abcdef, profile: default}\n"
      "  - {name: forked, token: forked-token-0123456789abcdef, profile: " +
          forked + "}\n  - {name: egress, token: egress-token-0123456789abcdef, profile: " + egress +
          "}\nlimits: {pool_size: 1}\naudit_log: " + audit_log + "\n",
      "", {}, [&kept] { keep_only(kept); });
  ASSERT_TRUE(node.ready()) << node.log();
  EXPECT_EQ(bounding_set_of(node.pid()), mask_of(kept));
  const auto orphans_before = orphaned_run_cgroups();
  for (const std::string tenant : {"plain", "forked", "egress"}) {
    for (int i = 0; i < 2; ++i) {  // the second one warm (or forked)
      json r = run_as(node, tenant, "def main(args):\n    return 6 * 7", "python");
      EXPECT_EQ(r.value("return", json()), 42) << tenant << ": " << r.dump() << node.log();
      r = run_as(node, tenant, "async function main(args) { return 6 * 7; }", "javascript");
      EXPECT_EQ(r.value("return", json()), 42) << tenant << ": " << r.dump() << node.log();
    }
  }
  json r = run_as(node, "egress",
                  "import urllib.request\ndef main(args):\n    try:\n"
                  "        urllib.request.urlopen('http://denied.example/', timeout=10)\n"
                  "    except Exception as e:\n        return str(e)",
                  "python");
  EXPECT_EQ(r.value("return", json()), "HTTP Error 403: Forbidden") << r.dump();
  EXPECT_EQ(r["network"].value("denied", 0), 1) << r.dump();
  r = run_as(node, "plain", "import time\ndef main(args):\n    time.sleep(60)", "python", 1);
  EXPECT_EQ(r.value("status", ""), "timeout") << r.dump();
  EXPECT_EQ(node.stop(SIGTERM), 0) << node.log();
  struct stat st {};
  ASSERT_EQ(::stat(audit_log.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(slurp(audit_log).find("\"event\":\"run\""), std::string::npos) << slurp(audit_log);
  EXPECT_EQ(node.log().find(" error "), std::string::npos) << node.log();
  EXPECT_TRUE(dir_entries(node.tmp()).empty()) << "a workspace remained";
  std::set<std::string> orphans = orphaned_run_cgroups();
  for (const auto& o : orphans_before) orphans.erase(o);
  EXPECT_TRUE(orphans.empty()) << "a run cgroup remained: " << *orphans.begin();

  // What a fork request may be (the node refuses a profile past it) goes
  // through under the set: SO_SNDBUFFORCE needs CAP_NET_ADMIN, which it lacks.
  const pid_t probe = ::fork();
  if (probe == 0) {
    cap_t caps = cap_init();
    if (!caps || cap_set_flag(caps, CAP_EFFECTIVE, static_cast<int>(kept.size()), kept.data(), CAP_SET) != 0 ||
        cap_set_flag(caps, CAP_PERMITTED, static_cast<int>(kept.size()), kept.data(), CAP_SET) != 0 ||
        cap_set_proc(caps) != 0)
      ::_exit(124);
    const size_t capacity = fork_request_capacity();
    int sv[2];
    if (capacity == 0 || ::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) ::_exit(125);
    make_room_for_a_fork_request(sv[0]);
    const std::string message(capacity, 'F');
    ::_exit(::send(sv[0], message.data(), message.size(), MSG_DONTWAIT) == static_cast<ssize_t>(capacity) ? 0 : 1);
  }
  EXPECT_EQ(wait_cli(probe), 0) << "a fork request of the capacity the node allows did not go through";

  // `nsbox run` from the command line, as an operator under the same set.
  auto [code, out] = nsbox_keeping(kept, {"run", "--rootfs", test_rootfs(), "--", "/bin/sh", "-c", "echo sandboxed"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "sandboxed\n");
  // Nothing nsbox falls back to without a capability (the doctor names
  // each such fallback as a warn line, e.g. pidfd_getfd without SYS_PTRACE).
  const std::string all = warn_and_fail_lines(run_cli({"doctor"}).out);
  std::tie(code, out) = nsbox_keeping(kept, {"doctor"});
  EXPECT_EQ(warn_and_fail_lines(out), all) << out;
}

}  // namespace
}  // namespace nsbox::testing
