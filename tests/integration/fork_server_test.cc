// The fork servers (profile key fork_server): runs they fork, Python and
// JavaScript, are sandboxed exactly like runs started from nothing, each in
// namespaces and a cgroup of its own, and the fork servers themselves hold
// no privilege.
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/kcmp.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "forkinit.h"
#include "node_process.h"
#include "nsbox/fork_messages.h"
#include "nsbox/proc_stat.h"
#include "nsbox/profile_apply.h"
#include "nsbox/profile_loader.h"
#include "nsbox/unique_fd.h"

namespace nsbox::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kForkedToken = "forked-tenant-token-0123456789ab";

json run_as(const NodeProcess& node, const std::string& code, bool forked, const std::string& language = "",
            const nlohmann::ordered_json& inputs = nlohmann::ordered_json::object()) {
  httplib::Headers auth;
  if (forked) auth.emplace("Authorization", std::string("Bearer ") + kForkedToken);
  auto r = post(node.client(), "/v1/runs", request(code, inputs, 0, language), auth);
  if (!r) return {{"no_response", httplib::to_string(r.error())}};
  json j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? json{{"http_status", r->status}, {"body", r->body}} : j;
}

// An answer as a failure message shows it: long strings (the contract's
// 5 MiB cases) shortened to their length.
std::string summary(json answer) {
  for (auto& [key, value] : answer.items())
    if (value.is_string() && value.get_ref<const std::string&>().size() > 2000)
      value = "<" + std::to_string(value.get_ref<const std::string&>().size()) + " characters>";
  return answer.dump();
}

// A node with two tenants of the default profile: "started" (warm sandboxes
// started from nothing) and "forked" (the same profile with fork_server).
class ForkServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(node_.ready()) << node_.log();
    ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 4)) << node_.log();  // 2 tenants x 2 languages
  }
  // The fork server and the PID 1 of the forked tenant's one warm sandbox,
  // ready (SetUp waited for it).
  void find_warm_init(pid_t* zygote, pid_t* init) const {
    const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
    ASSERT_EQ(zygotes.size(), 1u);
    const std::vector<pid_t> children = children_of(zygotes[0]);
    ASSERT_EQ(children.size(), 1u);
    *zygote = zygotes[0];
    *init = children[0];
  }
  // The Node fork server and its warm sandbox's workload, waiting for its
  // job (SetUp waited for it).
  void find_warm_node_workload(pid_t* zygote, pid_t* workload) const {
    const std::vector<pid_t> zygotes = fork_servers_of(node_.pid(), kNodeForkServerScript);
    ASSERT_EQ(zygotes.size(), 1u);
    const std::vector<pid_t> inits = children_of(zygotes[0]);
    ASSERT_EQ(inits.size(), 1u);
    const std::vector<pid_t> workloads = children_of(inits[0]);
    ASSERT_EQ(workloads.size(), 1u);
    *zygote = zygotes[0];
    *workload = workloads[0];
  }
  TempDir dir_;
  NodeProcess node_{
      "tenants:\n  - {name: started, profile: default}\n  - name: forked\n    token: " + std::string(kForkedToken) +
      "\n    profile: " + dir_.write("forked.yaml", "name: forked\nextends: default\nfork_server: true\n") +
      "\ndefault_tenant: started\nlimits:\n  pool_size: 1\n  body_limit: 16MiB\n"};  // the contract's 5 MiB cases
};

// What a run can observe of its sandbox, everything a difference between a
// forked run and a started one would show in.
const char* const kObserve = R"(import ctypes, os, resource, socket
def main(args):
    status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
    libc = ctypes.CDLL(None, use_errno=True)
    attempts = {}
    for name, call in [('unshare', lambda: libc.unshare(0x10000000)),
                       ('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
                       ('sethostname', lambda: libc.sethostname(b'x', 1)),
                       ('ptrace', lambda: libc.ptrace(16, 1, 0, 0)),
                       ('keyctl', lambda: libc.syscall(250, 0, 0, 0, 0))]:
        attempts[name] = [call(), ctypes.get_errno()]
    try:
        open('/usr/nsbox-probe', 'w')
        rootfs = 'writable'
    except OSError as e:
        rootfs = e.errno
    open('/tmp/probe', 'w').write('x')
    srv = socket.socket()
    srv.bind(('127.0.0.1', 0))
    srv.listen(1)
    socket.create_connection(srv.getsockname()).close()
    return {
        'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
        'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
        'no_new_privs': status['NoNewPrivs'].strip(), 'seccomp': status['Seccomp'].strip(),
        'pids': [os.getpid(), os.getppid(), sorted(p for p in os.listdir('/proc') if p.isdigit())],
        'hostname': socket.gethostname(), 'cwd': os.getcwd(), 'env': sorted(os.environ),
        'rlimits': [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE,
                                                   resource.RLIMIT_CORE, resource.RLIMIT_NPROC)],
        'masked': [os.listdir('/proc/sys'), open('/proc/kallsyms').read(), os.path.exists('/proc/kcore'),
                   open('/proc/zoneinfo').read()],
        'cgroup': [l.split(':', 2)[2] for l in open('/proc/self/cgroup').read().splitlines()],
        'interfaces': [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]],
        'tmp': sorted(os.listdir('/tmp')), 'workspace': sorted(os.listdir('/workspace')),
        'workspace_inodes': os.statvfs('/workspace').f_files,
        'dev': sorted(os.listdir('/dev')), 'pts': sorted(os.listdir('/dev/pts')),
        'rootfs': rootfs, 'attempts': attempts, 'dumpable': open('/proc/self/stat').read() != '',
    }
)";

// Runs code once in each tenant's warm sandbox of language; both must
// succeed and return the same.
void run_both_and_compare(const NodeProcess& node, const std::string& code, const std::string& language, json* started,
                          json* forked) {
  *started = run_as(node, code, false, language);
  *forked = run_as(node, code, true, language);
  ASSERT_EQ((*started)["status"], "ok") << started->dump();
  ASSERT_EQ((*forked)["status"], "ok") << forked->dump();
  EXPECT_EQ((*started)["pool"], "warm");
  EXPECT_EQ((*forked)["pool"], "warm");
  EXPECT_EQ((*forked)["return"], (*started)["return"])
      << "forked: " << (*forked)["return"].dump(1) << "\nstarted: " << (*started)["return"].dump(1);
}

TEST_F(ForkServer, ARunSeesWhatAStartedRunSees) {
  json started, forked;
  ASSERT_NO_FATAL_FAILURE(run_both_and_compare(node_, kObserve, "", &started, &forked));
  // Denied calls answer EPERM and are counted, as for a started run.
  EXPECT_EQ(forked["return"]["attempts"]["unshare"], json({-1, EPERM}));
  EXPECT_EQ(forked["denied_syscalls"], started["denied_syscalls"]);
  EXPECT_EQ(forked["denied_syscalls"]["mount"], 1) << forked.dump();
  // Also the calls the fork server's own filter denies: the run's filter,
  // stacked on it, answers them.
  EXPECT_EQ(forked["denied_syscalls"]["ptrace"], 1) << forked.dump();
  EXPECT_EQ(forked["denied_syscalls"]["keyctl"], 1) << forked.dump();
  EXPECT_EQ(forked["return"]["attempts"]["ptrace"], json({-1, EPERM}));
  EXPECT_EQ(forked["return"]["workspace_inodes"], 16384 + 64) << "the workspace's inode cap, as a started run's";
  EXPECT_EQ(forked["return"]["caps"],
            json({"0000000000000000", "0000000000000000", "0000000000000000", "0000000000000000", "0000000000000000"}));
}

// The namespace inodes of a run, read while another run is alive (an inode
// number is reused once its namespace is gone).
const char* const kNamespaces = R"(import os, time
def main(args):
    ns = {n: os.readlink('/proc/self/ns/' + n) for n in ('user', 'mnt', 'pid', 'net', 'ipc', 'uts', 'cgroup')}
    time.sleep(1.0)
    return ns
)";

std::map<std::string, std::string> host_namespaces(pid_t pid) {
  std::map<std::string, std::string> out;
  for (const char* n : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    char buf[128] = {};
    const std::string path = "/proc/" + std::to_string(pid) + "/ns/" + n;
    ssize_t len = ::readlink(path.c_str(), buf, sizeof buf - 1);
    out[n] = len > 0 ? std::string(buf, static_cast<size_t>(len)) : "";
  }
  return out;
}

TEST_F(ForkServer, EachRunHasNamespacesOfItsOwn) {
  const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  const auto zygote = host_namespaces(zygotes[0]);
  json a, b;
  std::thread other([&] { b = run_as(node_, kNamespaces, true); });
  a = run_as(node_, kNamespaces, true);
  other.join();
  ASSERT_EQ(a["status"], "ok") << a.dump();
  ASSERT_EQ(b["status"], "ok") << b.dump();
  for (const char* n : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    const std::string ours = a["return"][n], theirs = b["return"][n];
    EXPECT_NE(ours, theirs) << n << ": two runs alive at once share it";
    EXPECT_NE(ours, zygote.at(n)) << n << ": a run shares it with its fork server";
    EXPECT_NE(theirs, zygote.at(n)) << n << ": a run shares it with its fork server";
  }
}

// Field 19 of /proc/PID/stat: the process's nice value.
int nice_of(pid_t pid) { return std::atoi(proc_stat_field(pid, 19).c_str()); }

// Every sandbox runs as one host user, so what a run sends to its process
// group reaches every member, in any pid namespace: a run that shared the
// fork server's group (or the spawner's) could slow or kill the fork
// server, the warm sandboxes and the other tenants' runs. Each sandbox,
// forked or started, is a session of its own.
TEST_F(ForkServer, WhatARunSendsToItsProcessGroupReachesNoOtherSandbox) {
  const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  json victim;
  std::thread slow(
      [&] { victim = run_as(node_, "import time\ndef main(args):\n    time.sleep(4)\n    return 'survived'", true); });
  ASSERT_TRUE(node_.wait_running(1)) << node_.log();
  const char* const kAttack =
      "import ctypes, os, signal\ndef main(args):\n"
      "    ctypes.CDLL(None).setpriority(1, 0, 19)  # PRIO_PGRP, this process's group\n"
      "    os.kill(0, signal.SIGKILL)\n";
  const json started = run_as(node_, kAttack, false);
  const json forked = run_as(node_, kAttack, true);
  slow.join();
  // Each attacker took its own sandbox down, and nothing else.
  EXPECT_EQ(started["status"], "killed") << started.dump();
  EXPECT_EQ(forked["status"], "killed") << forked.dump();
  EXPECT_EQ(victim["status"], "ok") << victim.dump();
  EXPECT_EQ(victim["return"], "survived") << victim.dump();
  EXPECT_EQ(fork_servers_of(node_.pid()), zygotes) << node_.log();
  EXPECT_EQ(nice_of(zygotes[0]), 0);
  EXPECT_NE(slurp("/proc/" + std::to_string(zygotes[0]) + "/stat").find(") S"), std::string::npos)
      << "the fork server is not sleeping: " << slurp("/proc/" + std::to_string(zygotes[0]) + "/stat");
  const json next = run_as(node_, "import os\ndef main(args):\n    return os.nice(0)", true);
  EXPECT_EQ(next["return"], 0) << next.dump();
}

// Whether needle is anywhere in the readable memory of process pid (read
// as root through /proc/PID/mem), a chunk at a time. Regions that cannot
// be read are skipped, and so are those of a gigabyte or more: nothing of
// nsbox's is that large, and AddressSanitizer's shadow is terabytes.
bool memory_holds(pid_t pid, const std::string& needle) {
  const std::string proc = "/proc/" + std::to_string(pid);
  UniqueFd mem(::open((proc + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (!mem) return false;
  constexpr unsigned long kChunk = 16ul << 20, kLargest = 1ul << 30;
  std::string buf(kChunk + needle.size(), '\0');
  std::istringstream maps(slurp(proc + "/maps"));
  for (std::string line; std::getline(maps, line);) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &start, &end, perms) != 3 || perms[0] != 'r') continue;
    if (end - start >= kLargest || line.find("[vvar") != std::string::npos ||
        line.find("[vsyscall]") != std::string::npos)
      continue;
    // Chunks overlap by the needle's length less one, so none is cut.
    for (unsigned long at = start; at < end; at += kChunk) {
      const size_t want = static_cast<size_t>(std::min(end - at, kChunk + needle.size() - 1));
      const ssize_t n = ::pread(mem.get(), buf.data(), want, static_cast<off_t>(at));
      if (n <= 0) break;
      if (std::string_view(buf.data(), static_cast<size_t>(n)).find(needle) != std::string_view::npos) return true;
    }
  }
  return false;
}

// The node reads its config, and so its tenants' tokens, only after it has
// forked the spawner: the spawner, its workers, the fork servers and every
// sandbox's PID 1 (a copy of the spawner's or a worker's memory, which one
// read primitive in a run would expose) hold none.
TEST_F(ForkServer, NoProcessButTheServerHoldsATenantsToken) {
  ASSERT_TRUE(memory_holds(node_.pid(), kForkedToken)) << "the check would prove nothing";
  const std::vector<pid_t> descendants = descendants_with_cmdline(node_.pid(), "");
  ASSERT_GE(descendants.size(), 4u);  // the spawner, workers, sandboxes, fork servers
  for (pid_t pid : descendants) {
    EXPECT_FALSE(memory_holds(pid, kForkedToken))
        << "process " << pid << " (" << first_line("/proc/" + std::to_string(pid) + "/comm") << ") holds a token";
  }
}

// The fork server clones each run's PID 1 itself, straight into the run's
// namespaces: no process stands between them (one fork fewer per run).
TEST_F(ForkServer, ClonesEachRunsPid1Itself) {
  pid_t zygote_pid = 0, init = 0;
  ASSERT_NO_FATAL_FAILURE(find_warm_init(&zygote_pid, &init));
  EXPECT_EQ(slurp("/proc/" + std::to_string(init) + "/comm"), "nsbox-init\n");
  std::istringstream nspid(status_field(init, "NSpid"));
  std::vector<std::string> levels{std::istream_iterator<std::string>(nspid), {}};
  ASSERT_EQ(levels.size(), 3u) << "host, the fork server's pid namespace, the run's";
  EXPECT_EQ(levels.back(), "1");
  // Its user namespace is a child of the fork server's.
  const auto zygote = host_namespaces(zygote_pid);
  EXPECT_NE(host_namespaces(init).at("user"), zygote.at("user"));
}

// Minor page faults a process has taken: field 10 of /proc/PID/stat.
long minor_faults(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream in(stat.substr(paren + 1));
  std::vector<std::string> fields{std::istream_iterator<std::string>(in), {}};
  return fields.size() > 7 ? std::stol(fields[7]) : -1;  // fields[0] is field 3
}

// A run's PID 1 shares its fork server's memory only while it sets the run
// up (the fork server waits meanwhile), then execs nsbox-init, a small
// static program: for the rest of the run it holds nothing of the fork
// server, in either language. Before, PID 1 was a copy of the fork server,
// mapping the interpreter and all its memory (RSS about 12 MiB for Python,
// 50 MiB for Node); its faults stay few (21 then, 24-29 now).
TEST_F(ForkServer, Pid1HoldsNothingOfTheForkServer) {
  for (const auto& [script, workload_comm] :
       {std::pair<std::string, std::string>{kForkServerScript, "python3\n"}, {kNodeForkServerScript, "node\n"}}) {
    SCOPED_TRACE(script);
    const std::vector<pid_t> zygotes = fork_servers_of(node_.pid(), script);
    ASSERT_EQ(zygotes.size(), 1u);
    const std::vector<pid_t> inits = children_of(zygotes[0]);
    ASSERT_EQ(inits.size(), 1u);
    const pid_t init = inits[0];
    // Its set-up is done: the warm sandbox's runner waits for its job.
    const std::vector<pid_t> workload = children_of(init);
    ASSERT_EQ(workload.size(), 1u);
    EXPECT_EQ(slurp("/proc/" + std::to_string(workload[0]) + "/comm"), workload_comm);
    EXPECT_EQ(slurp("/proc/" + std::to_string(init) + "/comm"), "nsbox-init\n");
    std::istringstream maps(slurp("/proc/" + std::to_string(init) + "/maps"));
    std::set<std::string> files;
    for (std::string line; std::getline(maps, line);)
      if (const size_t slash = line.find('/'); slash != std::string::npos) files.insert(line.substr(slash));
    // Nothing else: no anonymous memory is named, [heap], [stack], [vdso].
    EXPECT_EQ(files, std::set<std::string>{"/opt/nsbox/nsbox-init"}) << "the files PID 1 maps";
    const std::string rss = status_field(init, "VmRSS");
    ASSERT_FALSE(rss.empty());
    EXPECT_LT(std::stol(rss), 2048) << "kB resident in PID 1";
    const long faults = minor_faults(init);
    EXPECT_GE(faults, 0);
    EXPECT_LT(faults, 100) << "PID 1 of a forked run touched the fork server's memory";
  }
}

// kB of the smaps field `field` summed over pid's mappings that `keep`
// selects (given the mapping's header line).
template <typename Keep>
long smaps_kb(pid_t pid, const std::string& field, Keep keep) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/smaps"));
  long total = 0;
  bool kept = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find(' ') < line.find(':'))
      kept = keep(line);
    else if (kept && line.rfind(field + ":", 0) == 0)
      total += std::stol(line.substr(field.size() + 1));
  }
  return total;
}

// Node's fork server moves node's code onto transparent huge pages
// (rootfs/hugetext.c): a forked run inherits it mapped through a few
// entries instead of faulting in its 4 KiB pages of the node binary again.
// Without the move, a warm workload has about 13 MiB of the binary's code
// faulted in and no huge page.
TEST_F(ForkServer, NodesCodeIsOnHugePagesInEveryForkedRun) {
  const std::string thp = slurp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.find("[always]") == std::string::npos && thp.find("[madvise]") == std::string::npos)
    GTEST_SKIP() << "this kernel gives no transparent huge pages: " << thp;
  pid_t zygote = 0, workload = 0;
  ASSERT_NO_FATAL_FAILURE(find_warm_node_workload(&zygote, &workload));
  const auto everything = [](const std::string&) { return true; };
  const auto nodes_code = [](const std::string& header) {
    return header.find(" r-xp ") != std::string::npos && header.size() > 5 &&
           header.compare(header.size() - 5, 5, "/node") == 0;
  };
  for (const pid_t pid : {zygote, workload}) {
    SCOPED_TRACE("pid " + std::to_string(pid) + " " + slurp("/proc/" + std::to_string(pid) + "/cmdline"));
    EXPECT_GE(smaps_kb(pid, "AnonHugePages", everything), 16 * 1024) << "kB on huge pages";
    EXPECT_LT(smaps_kb(pid, "Rss", nodes_code), 4 * 1024) << "kB of the node binary's code mapped from the file";
  }
  // And the run works from it.
  const json r = run_as(node_, "function main() { return 6 * 7; }", true, "javascript");
  EXPECT_EQ(r["return"], 42) << summary(r);
}

// The cgroup paths of pid as the host sees them: one per v1 hierarchy nsbox
// uses, or the v2 one ("" key) when the host has no v1 hierarchy.
std::map<std::string, std::string> host_cgroups(pid_t pid) {
  std::map<std::string, std::string> v1, v2;
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2[""] = path;
    for (const char* c : {"memory", "cpu", "cpuacct", "pids", "freezer"}) {
      std::istringstream cs(controllers);
      for (std::string name; std::getline(cs, name, ',');)
        if (name == c) v1[c] = path;
    }
  }
  return v1.empty() ? v2 : v1;
}

std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<pid_t> out;
  for (pid_t child : children_of(root)) {
    out.push_back(child);
    for (pid_t d : descendants_of(child)) out.push_back(d);
  }
  return out;
}

// Whatever a run sees in its own cgroup namespace ("/"), the host sees
// every warm sandbox's PID 1 and workload, started or forked, in a run
// cgroup of its own in every hierarchy: a forked PID 1 joined the run's
// cgroup rather than staying in its fork server's.
TEST_F(ForkServer, EveryWarmSandboxIsInARunCgroupOfItsOwn) {
  pid_t zygote = 0, forked_init = 0;
  ASSERT_NO_FATAL_FAILURE(find_warm_init(&zygote, &forked_init));
  const auto zygote_cgroups = host_cgroups(zygote);
  ASSERT_FALSE(zygote_cgroups.empty());
  int inits = 0;
  for (pid_t init : descendants_of(node_.pid())) {
    if (slurp("/proc/" + std::to_string(init) + "/comm") != "nsbox-init\n") continue;
    ++inits;
    const auto own = host_cgroups(init);
    ASSERT_EQ(own.size(), zygote_cgroups.size()) << "pid " << init;
    for (pid_t p : children_of(init)) EXPECT_EQ(host_cgroups(p), own) << "workload " << p << " of " << init;
    for (const auto& [controller, path] : own) {
      EXPECT_NE(path.find("/nsbox/run-"), std::string::npos) << controller << ": " << path;
      if (init == forked_init) {
        EXPECT_NE(path, zygote_cgroups.at(controller)) << controller << " of a forked PID 1";
      }
    }
  }
  // The started tenant's two sandboxes, and for each language the fork
  // server's own sandbox and the one it forked.
  EXPECT_GE(inits, 6);
  // JavaScript's forked PID 1 too.
  const std::vector<pid_t> js = fork_servers_of(node_.pid(), kNodeForkServerScript);
  ASSERT_EQ(js.size(), 1u);
  const std::vector<pid_t> js_inits = children_of(js[0]);
  ASSERT_EQ(js_inits.size(), 1u);
  const auto js_zygote = host_cgroups(js[0]), js_init = host_cgroups(js_inits[0]);
  ASSERT_EQ(js_init.size(), js_zygote.size());
  for (const auto& [controller, path] : js_init) EXPECT_NE(path, js_zygote.at(controller)) << controller;
}

TEST_F(ForkServer, HoldsNoPrivilege) {
  const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  const pid_t z = zygotes[0];
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    EXPECT_EQ(status_field(z, set), "0000000000000000") << set;
  EXPECT_EQ(status_field(z, "NoNewPrivs"), "1");
  EXPECT_EQ(status_field(z, "Seccomp"), "2");
  EXPECT_NE(status_field(z, "Uid").rfind("0\t", 0), 0u) << "the fork server runs as host root";
  // Its own namespaces, not the host's.
  const auto host = host_namespaces(::getpid());
  const auto ours = host_namespaces(z);
  for (const auto& [n, inode] : ours) EXPECT_NE(inode, host.at(n)) << n;
}

TEST_F(ForkServer, ReplacedWhenItDies) {
  const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  ASSERT_EQ(::kill(zygotes[0], SIGKILL), 0);
  // Its sandbox, and the warm run it forked, go with it; the pool starts a
  // new one and refills.
  std::vector<pid_t> now;
  for (int i = 0; i < 1000; ++i) {
    now = fork_servers_of(node_.pid());
    if (now.size() == 1 && now[0] != zygotes[0]) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], zygotes[0]);
  // The node's log says how it ended (the reason was empty for a kill),
  // once its keeper has collected it.
  const std::string said = "fork server of profile forked ended: killed by signal 9";
  for (int i = 0; i < 1500 && node_.log().find(said) == std::string::npos; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_NE(node_.log().find(said), std::string::npos) << node_.log();
  ASSERT_TRUE(wait_metric(node_, "nsbox_pool_idle", 4)) << node_.log();
  json r = run_as(node_, "def main(args):\n    return 7", true);
  EXPECT_EQ(r["return"], 7) << r.dump();
  EXPECT_EQ(r["pool"], "warm");
}

// The process that created the run cgroup pid is in (its name is
// run-<creator pid>-<start time>-<n>), or 0.
pid_t cgroup_creator(pid_t pid) {
  const std::string cgroups = slurp("/proc/" + std::to_string(pid) + "/cgroup");
  size_t at = cgroups.find("/run-");
  return at == std::string::npos ? 0 : static_cast<pid_t>(std::atoi(cgroups.c_str() + at + 5));
}

TEST_F(ForkServer, ARunEndsWhenItsSupervisorDies) {
  const std::string marker = unique_token("sleep-");
  json r;
  std::thread run([&] {
    r = run_as(node_,
               "import subprocess, time\ndef main(args):\n    subprocess.Popen(['sh', '-c', 'sleep 1019 # " + marker +
                   "'])\n    time.sleep(60)",
               true);
  });
  ASSERT_TRUE(wait_for_process(marker, 20000)) << node_.log();
  // A forked run's PID 1 is not its supervisor's child: no PR_SET_PDEATHSIG
  // ties them. The supervisor is the pool worker that made its cgroup.
  const std::vector<pid_t> in_run = host_pids_with_cmdline(marker);
  ASSERT_FALSE(in_run.empty());
  const pid_t supervisor = cgroup_creator(in_run[0]);
  ASSERT_GT(supervisor, 1) << slurp("/proc/" + std::to_string(in_run[0]) + "/cgroup");
  ASSERT_EQ(slurp("/proc/" + std::to_string(supervisor) + "/comm"), "nsbox-warm\n");
  ASSERT_EQ(::kill(supervisor, SIGKILL), 0);
  EXPECT_TRUE(wait_for_no_process(marker, 5000)) << "the run outlived its supervisor";
  run.join();
  EXPECT_NE(r.value("status", ""), "ok") << r.dump();
  // The killed supervisor could not remove the run's cgroup or workspace;
  // the spawner that reaps it does, while the node goes on serving.
  const std::string owner = "run-" + std::to_string(supervisor) + "-";
  auto left = [&] {
    std::vector<std::string> found;
    for (const auto& dir : orphaned_run_cgroups())
      if (dir.find("/" + owner) != std::string::npos) found.push_back(dir);
    for (const auto& name : dir_entries(node_.tmp()))
      if (name.find(owner) != std::string::npos) found.push_back(node_.tmp() + "/" + name);
    return found;
  };
  for (int i = 0; i < 250 && !left().empty(); ++i) std::this_thread::sleep_for(20ms);
  for (const auto& path : left()) ADD_FAILURE() << path << " outlived the supervisor that made it";
}

// The state letter of /proc/PID/stat ('S', 'D', 'T', ...), or 0.
char state_of(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t end = stat.rfind(')');
  return end == std::string::npos || end + 2 >= stat.size() ? 0 : stat[end + 2];
}

static_assert(JOIN_ANSWER_TIMEOUT_MS == kForkStepTimeoutMs, "PID 1 waits for nsbox as long as nsbox waits for it");

// The fork server waits (CLONE_VFORK) until a run's new PID 1 has been put
// in its cgroup by the pool worker that asked for it. A worker that stalled
// there (stopped by an operator, starved) held the fork server for good:
// every later fork of the profile waited 10 s and was started cold. PID 1
// now gives up after 10 s, and the fork server serves again while the
// worker is still stopped. strace stops the worker at that moment.
TEST_F(ForkServer, AWorkerThatStallsMidForkHoldsItsForkServerAtMostTenSeconds) {
  if (::access("/usr/bin/strace", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/strace to stop a worker mid-fork";
  pid_t spawner = -1;
  for (pid_t child : children_of(node_.pid()))
    if (slurp("/proc/" + std::to_string(child) + "/comm") == "nsbox-spawner\n") spawner = child;
  ASSERT_GT(spawner, 0);
  const std::vector<pid_t> zygotes = fork_servers_of(node_.pid());
  ASSERT_EQ(zygotes.size(), 1u);
  const pid_t zygote = zygotes[0];
  // Each new worker is stopped as it opens its run's PID 1 (its first
  // pidfd_open), before it answers PID 1 with the run's cgroup.
  const std::string target = std::to_string(spawner);
  const pid_t tracer = ::fork();
  if (tracer == 0) {
    ::execl("/usr/bin/strace", "strace", "-f", "-q", "-o", "/dev/null", "-e", "trace=pidfd_open", "-e",
            "inject=pidfd_open:signal=SIGSTOP:when=1", "-p", target.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(tracer, 0);
  pid_t stalled = -1;
  struct Release {  // whatever strace stopped goes on
    const pid_t& worker;
    pid_t tracer;
    pid_t spawner;
    ~Release() {
      ::kill(tracer, SIGTERM);
      int status;
      ::waitpid(tracer, &status, 0);
      for (pid_t p : {worker, spawner})
        if (p > 0) ::kill(p, SIGCONT);
    }
  } release{stalled, tracer, spawner};
  bool traced = false;
  for (int i = 0; i < 500 && !traced; ++i, std::this_thread::sleep_for(20ms))
    traced = slurp("/proc/" + target + "/status").find("TracerPid:\t0\n") == std::string::npos;
  ASSERT_TRUE(traced) << "strace did not attach to the spawner within 10 s";
  // Takes the warm sandbox: the refill's worker is stopped mid-fork.
  EXPECT_EQ(run_as(node_, "def main(args):\n    return 1", true).value("return", json()), 1);
  // Stopped for good, not caught in one of the syscall stops strace makes
  // every traced process pass through (one was taken for it in the slow
  // guest, and later found running).
  auto stays_stopped = [&](pid_t pid) {
    for (int i = 0; i < 20; ++i, std::this_thread::sleep_for(50ms))
      if (state_of(pid) != 't' && state_of(pid) != 'T') return false;
    return true;
  };
  for (int i = 0; i < 1500 && stalled < 0; ++i, std::this_thread::sleep_for(20ms))
    for (pid_t child : children_of(spawner))
      if ((state_of(child) == 't' || state_of(child) == 'T') && stays_stopped(child)) stalled = child;
  // What each process was doing, should this fail again (it did once, under
  // a loaded ctest -j2, for a reason not yet known).
  auto states = [&] {
    std::string out = "spawner " + target + " " + state_of(spawner) + ", strace " +
                      (::kill(tracer, 0) == 0 ? "alive" : "gone") + "; its children:";
    for (pid_t child : children_of(spawner))
      out += " " + std::to_string(child) + " " + state_of(child) + " " +
             slurp("/proc/" + std::to_string(child) + "/comm").substr(0, 15);
    return out;
  };
  ASSERT_GT(stalled, 0) << "no worker was stopped mid-fork: " << states() << "\n" << node_.log();
  // Within PID 1's 10 s (and the emulated guest's slowness): the fork
  // server waits for its next request again, with no run held.
  bool serving = false;
  for (int i = 0; i < 1500 && !serving; ++i, std::this_thread::sleep_for(20ms))
    serving = children_of(zygote).empty() && state_of(zygote) == 'S';
  EXPECT_TRUE(serving) << "fork server state " << state_of(zygote) << ", " << children_of(zygote).size()
                       << " children, 30 s after its worker stalled";
  const char worker_state = state_of(stalled);
  EXPECT_TRUE(worker_state == 't' || worker_state == 'T') << "the worker was let go before: " << worker_state;
}

TEST_F(ForkServer, AMissIsForkedToo) {
  // Four at once against a pool of one: the ones that find no warm sandbox
  // are forked at the request. A request that arrives once the refill is
  // starting waits for it instead (warm): on a slow machine a whole burst
  // can, so bursts are repeated until one has a miss, at most five.
  int forked = 0;
  for (int burst = 0; burst < 5 && forked == 0; ++burst) {
    std::vector<json> results(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < results.size(); ++i)
      threads.emplace_back([&, i] {
        results[i] = run_as(node_, "import time\ndef main(args):\n    time.sleep(0.5)\n    return 1", true);
      });
    for (auto& t : threads) t.join();
    for (const auto& r : results) {
      EXPECT_EQ(r["return"], 1) << r.dump();
      EXPECT_NE(r["pool"], "cold") << "a miss started an interpreter: " << r.dump();
      forked += r["pool"] == "forked";
    }
  }
  EXPECT_GE(forked, 1);
}

// ---- JavaScript: the same tenant's JavaScript runs, forked by zygote.js.

// What a JavaScript run can observe of its sandbox and of its process. The
// fds are listed by kind (their numbers differ by the order Node made them);
// threads are not: a forked run has Node's main thread only.
const char* const kObserveJs = R"(const fs = require('fs'), os = require('os');
function main(args) {
  const status = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').trim().split('\n')
    .map((l) => l.split(':\t').map((s) => s.trim())));
  let rootfs;
  try { fs.writeFileSync('/usr/nsbox-probe', 'x'); rootfs = 'writable'; } catch (e) { rootfs = e.code; }
  fs.writeFileSync('/tmp/probe', 'x');
  const kinds = {};
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    let target;
    try { target = fs.readlinkSync('/proc/self/fd/' + fd).replace(/[0-9]+/g, 'N'); } catch (e) { continue; }
    kinds[target] = (kinds[target] || 0) + 1;
  }
  return {
    ids: [process.getuid(), process.geteuid(), process.getgid(), process.getegid(), process.getgroups()],
    caps: ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'].map((k) => status[k]),
    no_new_privs: status.NoNewPrivs, seccomp: status.Seccomp, sig: [status.SigBlk, status.SigIgn],
    pids: [process.pid, process.ppid, fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p))],
    hostname: os.hostname(), cwd: process.cwd(), env: Object.keys(process.env).sort(),
    argv: process.argv, execArgv: process.execArgv, title: process.title,
    cmdline: fs.readFileSync('/proc/self/cmdline', 'utf8').replace(/\0+$/, ''),
    comm: fs.readFileSync('/proc/self/comm', 'utf8'), limits: fs.readFileSync('/proc/self/limits', 'utf8'),
    masked: [fs.readdirSync('/proc/sys'), fs.readFileSync('/proc/kallsyms', 'utf8'), fs.existsSync('/proc/kcore')],
    cgroup: fs.readFileSync('/proc/self/cgroup', 'utf8'), interfaces: fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2).map((l) => l.split(':')[0].trim()).filter(Boolean),
    tmp: fs.readdirSync('/tmp').sort(), workspace: fs.readdirSync('/workspace').sort(),
    dev: fs.readdirSync('/dev').sort(), pts: fs.readdirSync('/dev/pts').sort(), rootfs, fds: kinds,
    pid1: ['/proc/1/fd', '/proc/1/mem', '/proc/1/environ'].map((p) => {
      try { return fs.statSync(p).isDirectory() ? fs.readdirSync(p).length : fs.readFileSync(p).length; } catch (e) { return e.code; }
    }),
  };
}
)";

TEST_F(ForkServer, AJavaScriptRunSeesWhatAStartedRunSees) {
  json started, forked;
  ASSERT_NO_FATAL_FAILURE(run_both_and_compare(node_, kObserveJs, "javascript", &started, &forked));
  EXPECT_EQ(forked["return"]["seccomp"], "2");
  // The run's PID 1 shares the fork server's memory layout: it is closed to
  // the workload, as a started run's PID 1 is.
  EXPECT_EQ(forked["return"]["pid1"], json({"EACCES", "EACCES", "EACCES"}));
  EXPECT_EQ(forked["return"]["cmdline"], std::string("node\0/opt/nsbox/runner.js", 25));
  EXPECT_EQ(forked["denied_syscalls"], started["denied_syscalls"]);
}

// A forked workload has none of its zygote's platform worker threads, and
// Node's platform must not count them: a full GC's weak-reference clearing
// is a V8 job, which posted work for them that nothing ran, and Node waits
// for all posted work when the event loop empties. Such a run then hit its
// deadline where a started run reports that main never settled. The run
// asks V8 for the full GC it would otherwise run when its heap says so.
TEST_F(ForkServer, AJavaScriptRunWhoseLoopEmptiesAfterAFullGcEnds) {
  const char* const kCode = R"(async function main(args) {
  require('v8').setFlagsFromString('--expose-gc');
  require('vm').runInNewContext('gc')();
  await new Promise(() => {});
})";
  httplib::Headers auth{{"Authorization", std::string("Bearer ") + kForkedToken}};
  for (int i = 0; i < 3; ++i) {  // warm, and forked at the request
    SCOPED_TRACE(i);
    auto r = post(node_.client(), "/v1/runs", request(kCode, nlohmann::ordered_json::object(), 10, "javascript"), auth);
    ASSERT_TRUE(r);
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(j["pool"], "cold");
    EXPECT_EQ(j["error_type"], "exception") << r->body;
    EXPECT_NE(j["error"].dump().find("never settled"), std::string::npos) << r->body;
  }
}

// One run leaves everything it can behind; the next run from the same fork
// server sees none of it, and draws other random numbers.
TEST_F(ForkServer, NothingOfAJavaScriptRunReachesTheNext) {
  const std::string leave = R"(const fs = require('fs'), cp = require('child_process');
function main(args) {
  globalThis.leaked = 1;
  process.env.LEAKED = '1';
  require('lodash').leaked = 1;
  Object.prototype.leakedProto = 1;
  fs.writeFileSync('/tmp/leaked', 'x');
  fs.writeFileSync('/dev/shm/leaked', 'x');
  setInterval(() => fs.appendFileSync('/tmp/ticks', '.'), 10);
  cp.spawn('/bin/sh', ['-c', 'sleep 30'], { detached: true, stdio: 'ignore' }).unref();
  return [Math.random(), crypto.randomUUID(), require('crypto').randomBytes(8).toString('hex'),
          require('lodash').random(0, 2 ** 40), require('vm').runInNewContext('Math.random()')];
}
)";
  const std::string look = R"(const fs = require('fs');
function main(args) {
  return {
    left: [typeof globalThis.leaked, process.env.LEAKED, require('lodash').leaked, ({}).leakedProto,
           fs.existsSync('/tmp/leaked'), fs.existsSync('/dev/shm/leaked'), fs.existsSync('/tmp/ticks'),
           fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p)).length],
    // lodash keeps its own reference to Math.random; a new realm seeds its
    // own generator from V8's.
    random: [Math.random(), crypto.randomUUID(), require('crypto').randomBytes(8).toString('hex'),
             require('lodash').random(0, 2 ** 40), require('vm').runInNewContext('Math.random()')],
    native: Math.random.toString().includes('[native code]'),
  };
}
)";
  json first = run_as(node_, leave, true, "javascript");
  json second = run_as(node_, look, true, "javascript");
  json third = run_as(node_, look, true, "javascript");
  ASSERT_EQ(first["status"], "ok") << first.dump();
  ASSERT_EQ(second["status"], "ok") << second.dump();
  ASSERT_EQ(third["status"], "ok") << third.dump();
  for (const json* r : {&first, &second, &third}) EXPECT_NE((*r)["pool"], "cold") << r->dump();
  // PID 1 and the workload only.
  EXPECT_EQ(second["return"]["left"], json({"undefined", nullptr, nullptr, nullptr, false, false, false, 2}));
  EXPECT_EQ(second["return"]["native"], true) << "Math.random is V8's own, reseeded";
  const json a = first["return"], b = second["return"]["random"], c = third["return"]["random"];
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NE(a[i], b[i]) << i << ": two runs of one fork server drew the same";
    EXPECT_NE(b[i], c[i]) << i << ": two runs of one fork server drew the same";
  }
}

// Node's threads, timers, child processes, signals, thread pool and
// WebAssembly work in a forked run as in a started one, though only the
// thread that forked lives on in it.
TEST_F(ForkServer, AJavaScriptRunHasAllOfNode) {
  const std::string code = R"(const cp = require('child_process'), crypto = require('crypto'), http = require('http');
const add = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 7, 1, 96, 2, 127, 127, 1, 127, 3, 2, 1, 0, 7, 7, 1, 3,
  97, 100, 100, 0, 0, 10, 9, 1, 7, 0, 32, 0, 32, 1, 106, 11]);
async function main(args) {
  const server = http.createServer((q, w) => { w.setHeader('content-type', 'application/wasm'); w.end(add); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const out = {
    timer: await new Promise((r) => setTimeout(() => r(1), 5)),
    file: (await require('fs').promises.readFile('/etc/hostname', 'utf8')).length > 0,
    pbkdf2: await new Promise((r, j) => crypto.pbkdf2('a', 'b', 10, 8, 'sha256', (e, k) => e ? j(e) : r(k.toString('hex')))),
    exec: cp.execSync('echo hi').toString().trim(),
    exit: await new Promise((r) => cp.spawn('/bin/sh', ['-c', 'exit 7']).on('exit', r)),
    signal: await new Promise((r) => { process.once('SIGUSR2', () => r('caught')); setTimeout(() => r('lost'), 2000); process.kill(process.pid, 'SIGUSR2'); }),
    wasm: (await WebAssembly.instantiate(add)).instance.exports.add(2, 3),
    wasmCompiled: (await WebAssembly.instantiate(await WebAssembly.compile(add))).exports.add(4, 5),
    wasmStreaming: (await WebAssembly.instantiateStreaming(fetch(url))).instance.exports.add(6, 7),
    wasmError: await WebAssembly.compile(new Uint8Array([1, 2, 3])).then(() => 'compiled', (e) => e.constructor.name),
    fetch: (await fetch(url)).headers.get('content-type'),
    worker: await new Promise((r) => {
      const { Worker } = require('worker_threads');
      new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true }).on('message', r);
    }),
  };
  server.close();
  return out;
}
)";
  const json expected = {{"timer", 1},
                         {"file", true},
                         {"pbkdf2", "8035ce8e3b671cc3"},
                         {"exec", "hi"},
                         {"exit", 7},
                         {"signal", "caught"},
                         {"wasm", 5},
                         {"wasmCompiled", 9},
                         {"wasmStreaming", 13},
                         {"wasmError", "CompileError"},
                         {"fetch", "application/wasm"},
                         {"worker", 42}};
  json started = run_as(node_, code, false, "javascript");
  json forked = run_as(node_, code, true, "javascript");
  EXPECT_EQ(started["return"], expected) << started.dump();
  EXPECT_EQ(forked["return"], expected) << forked.dump();
  EXPECT_NE(forked["pool"], "cold");
}

int kcmp_files(pid_t a, pid_t b, int fd_a, int fd_b) {
  return static_cast<int>(::syscall(SYS_kcmp, a, b, KCMP_FILE, fd_a, fd_b));
}

std::vector<int> open_fds(pid_t pid) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    out.push_back(std::stoi(e.path().filename().string()));
  return out;
}

// The zygote's helper threads do not live on in a run, but their event
// loops' fds (epoll sets, eventfds, pipes) would: shared with the zygote, a
// run could add its own fds to the zygote's epoll sets or wake its threads.
// A warm JavaScript sandbox, waiting for its request, shares no open file
// with its fork server.
TEST_F(ForkServer, AJavaScriptRunSharesNoFileWithItsForkServer) {
  pid_t z = 0, w = 0;
  ASSERT_NO_FATAL_FAILURE(find_warm_node_workload(&z, &w));
  EXPECT_EQ(slurp("/proc/" + std::to_string(w) + "/comm"), "node\n");
  const std::vector<int> zygote_fds = open_fds(z), workload_fds = open_fds(w);
  EXPECT_GE(workload_fds.size(), 10u) << "Node's own loop, signal pipes and the run's stdio";
  int compared = 0;
  for (int wfd : workload_fds) {
    char target[256] = {};
    const std::string link = "/proc/" + std::to_string(w) + "/fd/" + std::to_string(wfd);
    ASSERT_GT(::readlink(link.c_str(), target, sizeof target - 1), 0) << link;
    for (int zfd : zygote_fds) {
      const int same = kcmp_files(z, w, zfd, wfd);
      ASSERT_GE(same, 0) << "kcmp: " << std::strerror(errno);
      EXPECT_NE(same, 0) << "workload fd " << wfd << " (" << target << ") is the fork server's fd " << zfd;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// Every JavaScript case of the runner contract (tests/runners/cases.json)
// gets the same answer from a forked run as from a started one: results,
// errors and their stacks, output, process.exit, unhandled rejections.
TEST_F(ForkServer, EveryJavaScriptContractCaseAnswersAsInAStartedRun) {
  int compared = 0;
  for (const nlohmann::json& c : contract_cases()) {
    // Raw requests bypass the node; deadlines and memory limits are the
    // profile's, not the case's.
    if (c["language"] != "javascript" || c.contains("raw_request") || c["expected"].contains("status")) continue;
    const ExecRequest req = contract_request(c);
    const nlohmann::ordered_json inputs = nlohmann::ordered_json::parse(req.inputs.dump());
    SCOPED_TRACE(c["name"].get<std::string>());
    json started = run_as(node_, req.code, false, "javascript", inputs);
    json forked = run_as(node_, req.code, true, "javascript", inputs);
    EXPECT_NE(forked["pool"], "cold");
    for (const char* field : {"status", "error_type", "error", "return", "stdout", "stderr", "stdout_truncated"})
      EXPECT_EQ(forked[field], started[field])
          << field << "\nforked: " << summary(forked) << "\nstarted: " << summary(started);
    ++compared;
  }
  EXPECT_GE(compared, 50);
}

// A fork_server profile's env travels in every fork request. One of 300 KB
// (three values of 100 KB, each under the kernel's 128 KiB bound on one
// env string) is larger than a Unix socket's default send buffer: every
// forked run of the profile failed with "Message too long". Both languages'
// forked runs now see it whole.
std::string profile_with_env(const TempDir& dir, int values) {
  std::string yaml = "name: bigenv\nextends: default\nfork_server: true\nenv:\n";
  for (int i = 0; i < values; ++i) yaml += "  BIG" + std::to_string(i) + ": " + std::string(100000, 'a' + i) + "\n";
  return dir.write("bigenv.yaml", yaml);
}

TEST(ForkServerRequest, CarriesAProfileEnvOfHundredsOfKilobytes) {
  TempDir dir;
  NodeProcess node{"tenants:\n  - {name: big, profile: " + profile_with_env(dir, 3) +
                   "}\ndefault_tenant: big\nlimits:\n  pool_size: 1\n"};
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();  // one per language: both fork servers up
  const std::pair<const char*, const char*> programs[] = {
      {"python",
       "import os\ndef main(args):\n    return [os.environ['BIG%d' % i].count(chr(97 + i)) for i in range(3)]\n"},
      {"javascript",
       "function main(args) {\n  return [0, 1, 2].map((i) => process.env['BIG' + i].split(String.fromCharCode(97 + i))"
       ".length - 1);\n}\n"}};
  for (const auto& [language, code] : programs) {
    json r = run_as(node, code, false, language);
    ASSERT_EQ(r["status"], "ok") << summary(r);
    EXPECT_EQ(r["return"], json::array({100000, 100000, 100000})) << language;
    EXPECT_NE(r["pool"], "cold") << language;
  }
}

// A fork server parses a run's settings once and reuses them while they
// repeat (a profile's runs differ only in their fds). A repeat reaches its
// own run's fds; settings that change are the new run's, and the first
// ones again after them: driven here through one fork server of each
// language, with Launcher's own calls.
TEST(ForkServerRequest, SettingsThatChangeAreEachRunsOwn) {
  const std::pair<Language, const char*> programs[] = {
      {Language::kPython,
       "import os, socket\ndef main(args):\n    return [os.environ['SETTING'], socket.gethostname()]\n"},
      {Language::kJavaScript,
       "const os = require('os');\nfunction main(args) {\n  return [process.env.SETTING, os.hostname()];\n}\n"}};
  for (const auto& [language, code] : programs) {
    SCOPED_TRACE(language == Language::kPython ? "python" : "javascript");
    RunSpec base = exec_spec(spec_from_profile(load_profile("default", ProfileSearch{})), language);
    base.rootfs = test_rootfs();
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd requests(pair[0]), theirs(pair[1]);
    std::unique_ptr<PreparedRun> zygote = launcher().prepare(fork_server_spec(base, theirs.get()));
    theirs.reset();
    ASSERT_TRUE(zygote->wait_for_fork_requests(kForkServerStartTimeout, -1));
    for (const std::string value : {"first", "first", "second", "first"}) {
      RunSpec spec = base;
      set_env(spec.env, "SETTING", value);
      spec.hostname = "host-" + value;
      std::unique_ptr<PreparedRun> run = launcher().prepare_forked(spec, requests.get());
      const ExecOutcome out = finish_exec(*run, spec, ExecRequest{language, code, {}});
      EXPECT_EQ(out.status, "ok") << out.error.value_or("") << out.run.stderr_data;
      EXPECT_EQ(out.return_value, nlohmann::ordered_json::array({value, "host-" + value}));
    }
    requests.reset();
    zygote->finish(std::nullopt, std::chrono::milliseconds(1));
  }
}

// A profile whose forked runs' settings exceed what a fork request carries
// (the fork servers read at most 1 MiB) is refused when the node loads it,
// with the size and the bound named: every forked run of it would fail.
// One profile file is at most 1 MiB: the env comes from two, a parent
// (found on NSBOX_PROFILE_PATH) and the tenant's, 600 KB each.
// A warm sandbox and a forked run each make a UTS namespace from one that
// holds the node's domain name (here a corporate one): neither may show it.
TEST(ForkServerUts, WarmAndForkedRunsDoNotSeeTheHostsDomainName) {
  TempDir dir;
  NodeProcess node(
      "tenants:\n  - {name: started, profile: default}\n  - name: forked\n    token: " + std::string(kForkedToken) +
          "\n    profile: " + dir.write("forked.yaml", "name: forked\nextends: default\nfork_server: true\n") +
          "\ndefault_tenant: started\nlimits:\n  pool_size: 1\n",
      "", {}, [] {
        if (::unshare(CLONE_NEWUTS) != 0 || ::setdomainname(kHostDomainName, std::strlen(kHostDomainName)) != 0)
          ::_exit(99);
      });
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 4)) << node.log();
  const std::string code = std::string("import ctypes\ndef main(args):\n    b = ctypes.create_string_buffer(256)\n") +
                           "    ctypes.CDLL(None).getdomainname(b, 256)\n    return b.value.decode()\n";
  for (bool forked : {false, true}) {
    const json r = run_as(node, code, forked);
    EXPECT_EQ(r.value("return", json()), "(none)") << (forked ? "forked: " : "warm: ") << r;
  }
}

TEST(ForkServerRequest, OnePastTheBoundIsRefusedWhenTheNodeLoadsIt) {
  TempDir dir;
  std::string parent = "name: bigparent\nextends: default\nenv:\n", env;
  for (int i = 0; i < 6; ++i) {
    parent += "  P" + std::to_string(i) + ": " + std::string(100000, 'p') + "\n";
    env += "  C" + std::to_string(i) + ": " + std::string(100000, 'c') + "\n";
  }
  dir.write("bigparent.yaml", parent);
  const std::string forked = dir.write("big.yaml", "name: big\nextends: bigparent\nfork_server: true\nenv:\n" + env);
  const std::string started = dir.write("bigstarted.yaml", "name: big\nextends: bigparent\nenv:\n" + env);
  auto check = [&](const std::string& profile) {
    const std::string config =
        dir.write("node.yaml", "tenants:\n  - {name: big, profile: " + profile + "}\ndefault_tenant: big\n");
    ::setenv("NSBOX_PROFILE_PATH", dir.path().c_str(), 1);
    CliResult r = run_cli({"serve", "--config", config, "--check"});
    ::unsetenv("NSBOX_PROFILE_PATH");
    return r;
  };
  CliResult r = check(forked);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("profile " + forked + ": with fork_server, a python run's settings (12"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("exceed the 1 MiB a fork request carries"), std::string::npos) << r.err;
  // The same settings in runs that start their interpreter: no such bound.
  r = check(started);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A profile of Python runs from a fork server whose zygote, and only it,
// runs zygote_code first (a sitecustomize.py on PYTHONPATH, from dir).
std::string profile_with_zygote_code(const TempDir& dir, const std::string& zygote_code) {
  dir.write("sitecustomize.py",
            "with open('/proc/self/cmdline', 'rb') as f:\n"
            "    if b'zygote' in f.read():\n" +
                zygote_code);
  return dir.write("zygote.yaml",
                   "name: zygotecode\nextends: default\nfork_server: [python]\nenv: {PYTHONPATH: /site}\n"
                   "filesystem:\n  mounts:\n    - {source: " +
                       dir.path() + ", target: /site}\n");
}

std::string node_of(const std::string& profile) {
  return "tenants:\n  - {name: t, profile: " + profile + "}\ndefault_tenant: t\nlimits:\n  pool_size: 1\n";
}

// While a fork server starts, runs of its profile start their interpreter
// rather than wait for it: each step of a fork has 10 s, which the zygote's
// start-up must not eat (Node's takes seconds under emulation). Here the
// Python zygote's start-up lasts until the test lets it go (a file appears
// in /site): a run sent meanwhile starts cold and answers, and once the
// fork server serves, the profile's runs are forked again.
TEST(ForkServerStart, RunsStartTheirInterpreterUntilItServes) {
  TempDir dir;
  NodeProcess node{node_of(profile_with_zygote_code(dir,
                                                    "        import os, time\n"
                                                    "        for _ in range(1200):\n"
                                                    "            if os.path.exists('/site/go'): break\n"
                                                    "            time.sleep(0.05)\n"))};
  ASSERT_TRUE(node.ready()) << node.log();
  for (int i = 0; i < 3000 && fork_servers_of(node.pid()).empty(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_FALSE(fork_servers_of(node.pid()).empty()) << node.log();
  EXPECT_EQ(metric(node, "nsbox_pool_fork_servers"), 0) << "it served before its start-up was done";
  const std::string code = "def main(args):\n    return 6 * 7\n";
  json r = run_as(node, code, false, "python");
  EXPECT_EQ(r["return"], 42) << summary(r);
  EXPECT_EQ(r["pool"], "cold") << summary(r);
  EXPECT_EQ(metric(node, "nsbox_pool_fork_servers"), 0);

  dir.write("go", "");
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_fork_servers", 1)) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_idle", 2)) << node.log();  // Python's forked, JavaScript's started
  r = run_as(node, code, false, "python");
  EXPECT_EQ(r["return"], 42) << summary(r);
  EXPECT_EQ(r["pool"], "warm") << summary(r);
}

// What a fork server writes (its warnings) reaches the node's log while it
// serves, line by line and without terminal escapes, not only once it has
// ended, a long line in pieces of 4 KiB; and however much it writes, it
// never stalls on the pipe: 200 KiB on stdout and on stderr (three times a
// pipe's buffer) before it serves, and it still serves.
TEST(ForkServerStart, WhatItWritesReachesTheNodesLogAsItComes) {
  TempDir dir;
  NodeProcess node{node_of(profile_with_zygote_code(dir,
                                                    "        import sys\n"
                                                    "        sys.stderr.write('zygote says \\x1b[31mhello\\n')\n"
                                                    "        sys.stdout.write('x' * 200000)\n"
                                                    "        sys.stderr.write(('y' * 99 + '\\n') * 2000)\n"
                                                    "        sys.stderr.write('z' * 10000 + '\\n')\n"
                                                    "        sys.stderr.flush(); sys.stdout.flush()\n"))};
  ASSERT_TRUE(node.ready()) << node.log();
  ASSERT_TRUE(wait_metric(node, "nsbox_pool_fork_servers", 1)) << node.log();
  json r = run_as(node, "def main(args):\n    return 1\n", false, "python");
  EXPECT_EQ(r["return"], 1) << summary(r);
  EXPECT_NE(r["pool"], "cold") << summary(r);
  std::string log;
  for (int i = 0; i < 250; ++i) {
    log = node.log();
    if (log.find(std::string(4096, 'z')) != std::string::npos) break;  // its last line
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(log.find("fork server of profile zygotecode: zygote says ?[31mhello"), std::string::npos)
      << log.substr(0, 4000);
  EXPECT_EQ(log.find("\x1b[31m"), std::string::npos) << "a terminal escape reached the log";
  // A long line comes in pieces of 4 KiB.
  EXPECT_NE(log.find("zygotecode: " + std::string(4096, 'z') + "\n"), std::string::npos);
  EXPECT_EQ(log.find(std::string(4097, 'z')), std::string::npos);
  EXPECT_EQ(fork_servers_of(node.pid()).size(), 1u) << "it is still the fork server that serves";
}

}  // namespace
}  // namespace nsbox::testing
