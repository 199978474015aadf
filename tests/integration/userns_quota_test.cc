// The quotas of each run's user namespace (userns.h, UserNsQuota) and the
// rlimits of what the kernel charges up the chain (rlimits.h,
// charged_rlimits): what a run can hold of the per-user kernel objects
// charged to the user that made its namespace, host root, and that it can
// make no nested user namespace, in runs started from nothing and in forked
// ones alike. Each behaviour test
// would pass the host's quotas (128 instances, far more watches) without
// them.
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "fixture.h"
#include "nsbox/profile_apply.h"
#include "nsbox/profile_loader.h"
#include "nsbox/rlimits.h"
#include "nsbox/unique_fd.h"
#include "nsbox/userns.h"

namespace nsbox::testing {
namespace {

using ordered_json = nlohmann::ordered_json;

RunSpec default_exec_spec(Language language) {
  RunSpec spec = exec_spec(spec_from_profile(load_profile("default", ProfileSearch{})), language);
  spec.rootfs = test_rootfs();
  return spec;
}

// A fork server of spec, ready for requests, ended when this goes.
class ForkServerOf {
 public:
  explicit ForkServerOf(const RunSpec& spec) : spec_(spec) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    requests_.reset(pair[0]);
    UniqueFd theirs(pair[1]);
    zygote_ = launcher().prepare(fork_server_spec(spec, theirs.get()));
    theirs.reset();
    EXPECT_TRUE(zygote_->wait_for_fork_requests(kForkServerStartTimeout, -1));
  }
  ~ForkServerOf() {
    requests_.reset();
    zygote_->finish(std::nullopt, std::chrono::milliseconds(1));
  }
  ExecOutcome run(const ExecRequest& request) const {
    std::unique_ptr<PreparedRun> run = launcher().prepare_forked(spec_, requests_.get());
    return finish_exec(*run, spec_, request);
  }

 private:
  RunSpec spec_;
  UniqueFd requests_;
  std::unique_ptr<PreparedRun> zygote_;
};

// Runs code once started from nothing and once forked from a fork server
// of spec; both must succeed. Returns their values, started first.
std::pair<ordered_json, ordered_json> run_started_and_forked(const RunSpec& spec, Language language,
                                                             const std::string& code) {
  const ExecRequest request{language, code, {}};
  const ExecOutcome started = run_exec(launcher(), spec, request);
  EXPECT_EQ(started.status, "ok") << started.error.value_or("") << started.run.stderr_data << started.run.error;
  const ExecOutcome forked = ForkServerOf(spec).run(request);
  EXPECT_EQ(forked.status, "ok") << forked.error.value_or("") << forked.run.stderr_data << forked.run.error;
  return {started.return_value, forked.return_value};
}

// inotify_init1 until it fails, then watches on files of /tmp until that
// fails, then fanotify_init as an unprivileged process may call it (kernels
// from 5.13 on allow that; Debian 12's is 6.1).
const char* const kHoldInotify = R"(import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def main(args):
    fds = []
    while len(fds) < 200 and (fd := libc.inotify_init1(0)) >= 0:
        fds.append(fd)
    instances = [len(fds), ctypes.get_errno()]
    for i in range(40):
        open('/tmp/w%d' % i, 'w').close()
    watches = 0
    while watches < 40 and libc.inotify_add_watch(fds[0], b'/tmp/w%d' % watches, 0x100) >= 0:
        watches += 1
    FAN_CLASS_NOTIF, FAN_REPORT_FID = 0, 0x200
    return [instances, [watches, ctypes.get_errno()],
            [libc.fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID, 0), ctypes.get_errno()]]
)";

TEST(UserNsQuotas, ARunHoldsTheInotifyItsLimitsAllowAndNoFanotifyGroup) {
  RunSpec spec = default_exec_spec(Language::kPython);
  spec.limits.inotify_instances = 3;
  spec.limits.inotify_watches = 5;
  // Without the quotas, 200 instances would stop at the host's 128 at most,
  // and 40 watches and a group would be had.
  const ordered_json expected = {{3, EMFILE}, {5, ENOSPC}, {-1, EMFILE}};
  auto [started, forked] = run_started_and_forked(spec, Language::kPython, kHoldInotify);
  EXPECT_EQ(started, expected) << started.dump();
  EXPECT_EQ(forked, expected) << forked.dump();
}

// A JavaScript run's watches (libuv's inotify, one instance per loop): the
// forked one's quotas come through zygote.js and forkinit.node.
const char* const kWatchFromNode = R"(const fs = require('fs');
function main(args) {
  const watchers = [];
  try {
    for (let i = 0; i < 40; ++i) {
      fs.writeFileSync(`/tmp/w${i}`, '');
      watchers.push(fs.watch(`/tmp/w${i}`));
    }
    return [watchers.length, 'none'];
  } catch (e) {
    return [watchers.length, e.code];
  } finally {
    for (const w of watchers) w.close();
  }
}
)";

TEST(UserNsQuotas, AJavaScriptRunHoldsTheWatchesItsLimitsAllow) {
  RunSpec spec = default_exec_spec(Language::kJavaScript);
  spec.limits.inotify_watches = 7;
  const ordered_json expected = {7, "ENOSPC"};
  auto [started, forked] = run_started_and_forked(spec, Language::kJavaScript, kWatchFromNode);
  EXPECT_EQ(started, expected) << started.dump();
  EXPECT_EQ(forked, expected) << forked.dump();
}

// The /proc/sys/user values of the user namespace pid is in, as a process
// in it reads them (the files act on the reader's own namespace), "|"
// between them: a forked child of this test joins it and reads them.
const char* const kQuotaFiles[] = {"max_inotify_instances", "max_inotify_watches", "max_fanotify_groups",
                                   "max_fanotify_marks", "max_user_namespaces"};

std::string quotas_of_user_ns_of(pid_t pid) {
  UniqueFd ns(::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return "";
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return "";
  UniqueFd read_end(out[0]), write_end(out[1]);
  const pid_t child = ::fork();
  if (child == 0) {  // raw calls only: this process has other threads
    if (::setns(ns.get(), CLONE_NEWUSER) != 0) ::_exit(1);
    for (const char* name : kQuotaFiles) {
      char path[64] = "/proc/sys/user/", value[32];
      std::strcat(path, name);
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      const ssize_t n = fd < 0 ? 0 : ::read(fd, value, sizeof value);
      if (n > 1 && ::write(write_end.get(), value, static_cast<size_t>(n) - 1) < 0) ::_exit(1);
      if (::write(write_end.get(), "|", 1) < 0) ::_exit(1);
    }
    ::_exit(0);
  }
  write_end.reset();
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(read_end.get(), buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? text : "";
}

// Every sandbox PID 1 (nsbox-init) below this process and the quotas of its
// user namespace, as last seen (polled every 20 ms) until stopped. Each
// run's and the fork server's sandbox have one.
class PidOneWatch {
 public:
  PidOneWatch()
      : thread_([this] {
          while (!stop_) {
            // The last values each shows: PID 1 is named before it sets them.
            for (pid_t pid : descendants_with_cmdline(::getpid(), "nsbox-init")) {
              // A workload shows PID 1's name until its execve.
              const pid_t parent = static_cast<pid_t>(std::atoi(status_field(pid, "PPid").c_str()));
              if (process_alive_with_cmdline(parent, "nsbox-init")) continue;
              std::string quotas = quotas_of_user_ns_of(pid);
              if (!quotas.empty()) seen_[pid] = quotas;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  std::multiset<std::string> stop() {
    stop_ = true;
    thread_.join();
    std::multiset<std::string> out;
    for (const auto& [pid, quotas] : seen_) out.insert(quotas);
    return out;
  }

 private:
  std::atomic<bool> stop_{false};
  std::map<pid_t, std::string> seen_;
  std::thread thread_;
};

// Read from outside, as no run can (its /proc/sys is masked): a started
// run's namespace and a forked run's have the quotas; the fork server's has
// none, as it must make its runs' user namespaces.
TEST(UserNsQuotas, EachRunsNamespaceHasThemAndTheForkServersHasNone) {
  RunSpec spec = default_exec_spec(Language::kPython);
  spec.limits.inotify_instances = 5;
  spec.limits.inotify_watches = 300;
  PidOneWatch watch;
  auto [started, forked] = run_started_and_forked(spec, Language::kPython,
                                                  "import time\ndef main(args):\n    time.sleep(1)\n    return 1\n");
  const std::multiset<std::string> seen = watch.stop();
  EXPECT_EQ(started, 1);
  EXPECT_EQ(forked, 1);
  const std::string runs = "5|300|0|0|0|";
  const std::string unbounded = "2147483647|2147483647|2147483647|2147483647|2147483647|";
  EXPECT_EQ(seen, (std::multiset<std::string>{runs, runs, unbounded})) << "the runs' and the fork server's";
}

// A field of /proc/PID/limits: "soft hard".
std::string limit_of(pid_t pid, const std::string& name) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/limits"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    std::istringstream fields(line.substr(name.size()));
    std::string soft, hard;
    fields >> soft >> hard;
    return soft + " " + hard;
  }
  return "";
}

// What a run's user namespace may charge through its fork server's is
// capped by the fork server's own rlimits when it made that namespace: at
// a run's low limits, all its runs together would share one run's
// pending signals. It keeps the host's; each run's PID 1 sets the run's.
TEST(UserNsQuotas, AForkServerKeepsTheHostsChargedLimitsWhichItsRunsLower) {
  const RunSpec spec = default_exec_spec(Language::kPython);
  const ForkServerOf server(spec);
  const std::vector<pid_t> servers = descendants_with_cmdline(::getpid(), kForkServerScript);
  ASSERT_EQ(servers.size(), 1u);
  const pid_t self = ::getpid();
  EXPECT_EQ(limit_of(servers[0], "Max pending signals"), limit_of(self, "Max pending signals"));
  EXPECT_EQ(limit_of(servers[0], "Max msgqueue size"), limit_of(self, "Max msgqueue size"));
  const ExecOutcome out =
      server.run(ExecRequest{Language::kPython,
                             "def main(args):\n    return [l.split()[3:5] for l in open('/proc/self/limits')\n"
                             "            if l.startswith(('Max pending signals', 'Max msgqueue size'))]\n",
                             {}});
  EXPECT_EQ(out.status, "ok") << out.error.value_or("") << out.run.stderr_data;
  const std::string pending = std::to_string(kRunPendingSignals);
  EXPECT_EQ(out.return_value,
            ordered_json::array({ordered_json::array({pending, pending}), ordered_json::array({"0", "0"})}));
}

// A process of the sandboxes' host user, as a run's code is, holding
// descriptors in flight over a unix socket (sent, never received) past its
// RLIMIT_NOFILE (a run's 256, or a profile's larger open_files), until this
// goes. The kernel counts them per host user and refuses SCM_RIGHTS to every
// process of that user whose own limit the count exceeds.
class DescriptorsInFlight {
 public:
  explicit DescriptorsInFlight(rlim_t limit) {
    int report[2], hold[2];
    EXPECT_EQ(::pipe2(report, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(hold, O_CLOEXEC), 0);
    const HostIds ids = choose_host_ids();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(report[0]);
      ::close(hold[1]);
      int pair[2];
      const rlimit nofile{limit, limit};
      int err = 0;
      if (::socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) != 0 || ::setrlimit(RLIMIT_NOFILE, &nofile) != 0 ||
          ::setresgid(ids.gid, ids.gid, ids.gid) != 0 || ::setresuid(ids.uid, ids.uid, ids.uid) != 0)
        err = -errno;
      for (rlim_t sent = 0; err == 0 && sent < limit + 2000; sent += 200) {
        int fds[200];
        std::fill(std::begin(fds), std::end(fds), pair[1]);
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
        char byte = 'x';
        iovec iov{&byte, 1};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof fds);
        std::memcpy(CMSG_DATA(c), fds, sizeof fds);
        if (::sendmsg(pair[0], &msg, 0) < 0) err = errno;
      }
      (void)!::write(report[1], &err, sizeof err);
      char end;
      (void)!::read(hold[0], &end, 1);
      ::_exit(0);
    }
    ::close(report[1]);
    ::close(hold[0]);
    hold_.reset(hold[1]);
    if (::read(report[0], &errno_, sizeof errno_) != sizeof errno_) errno_ = -1;
    ::close(report[0]);
  }
  ~DescriptorsInFlight() {
    hold_.reset();
    ::waitpid(pid_, nullptr, 0);
  }
  int refusal() const { return errno_; }  // ETOOMANYREFS once it holds past its limit

 private:
  pid_t pid_ = -1;
  UniqueFd hold_;
  int errno_ = 0;
};

// A run's descriptors in flight must not keep another sandbox from starting:
// each hands its seccomp listener (and a forked run's PID 1 its pidfd) to
// nsbox over a unix socket. Found by review: one run holding 400 stopped
// every sandbox of the host, of every tenant, while it lived.
TEST(UserNsQuotas, AnotherRunsDescriptorsInFlightKeepNoSandboxFromStarting) {
  if (::geteuid() != 0) GTEST_SKIP() << "runs as the sandboxes' host user only as root";
  // Past nsbox's own limit too, which a started PID 1 sends with: a profile
  // may give its runs a larger open_files than a run's 256 (2048 here), and
  // nsbox may run with the 1024 of a shell.
  const DescriptorsInFlight held(2048);
  ASSERT_EQ(held.refusal(), ETOOMANYREFS) << "the holder did not get past its limit";
  // A started run's PID 1 hands over the egress proxy's socket.
  RunSpec egress = exec_spec(spec_from_profile(load_profile(
                                 std::string(NSBOX_SOURCE_DIR) + "/profiles/tenants/api-caller.yaml", ProfileSearch{})),
                             Language::kPython);
  egress.rootfs = test_rootfs();
  rlimit own{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &own), 0);
  const rlimit shell{std::min<rlim_t>(own.rlim_cur, 1024), own.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &shell), 0);
  const ExecOutcome proxied =
      run_exec(launcher(), egress, {Language::kPython, "def main(args):\n    return 'ran'\n", {}});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &own), 0);
  EXPECT_EQ(proxied.return_value, "ran") << proxied.error.value_or("") << proxied.run.error;
  for (const Language language : {Language::kPython, Language::kJavaScript}) {
    const RunSpec spec = default_exec_spec(language);
    const ExecRequest request{language,
                              language == Language::kPython ? "def main(args):\n    return 'ran'\n"
                                                            : "function main(args) { return 'ran'; }\n",
                              {}};
    const ExecOutcome started = run_exec(launcher(), spec, request);
    EXPECT_EQ(started.return_value, "ran") << started.error.value_or("") << started.run.error;
    // A warm sandbox, waited for before it is used, as the pool does.
    std::unique_ptr<PreparedRun> warm = launcher().prepare(spec);
    EXPECT_TRUE(warm->wait_for_input(std::chrono::seconds(30), std::chrono::milliseconds(5)));
    const ExecOutcome pooled = finish_exec(*warm, spec, request);
    EXPECT_EQ(pooled.return_value, "ran") << pooled.error.value_or("") << pooled.run.error;
    const ExecOutcome forked = ForkServerOf(spec).run(request);
    EXPECT_EQ(forked.return_value, "ran") << forked.error.value_or("") << forked.run.error;
  }
}

}  // namespace
}  // namespace nsbox::testing
