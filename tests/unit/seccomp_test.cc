#include "nsbox/seccomp.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace nsbox {
namespace {

bool has_rule(const SeccompProgram& p, const std::string& syscall, const std::string& action) {
  return std::any_of(p.rules().begin(), p.rules().end(),
                     [&](const SeccompRuleInfo& r) { return r.syscall == syscall && r.action == action; });
}

TEST(DefaultPolicy, CompilesToBpf) {
  SeccompProgram p = SeccompProgram::default_policy();
  EXPECT_GT(p.instruction_count(), 20u);
  EXPECT_EQ(p.program()->len, p.instruction_count());
  EXPECT_NE(p.program()->filter, nullptr);
}

TEST(DefaultPolicy, DeniesWhatTheLauncherPromises) {
  SeccompProgram p = SeccompProgram::default_policy();
  for (const char* s :
       {"ptrace",       "mount",       "umount2",     "pivot_root",   "chroot",        "unshare",
        "setns",        "keyctl",      "add_key",     "request_key",  "bpf",           "perf_event_open",
        "userfaultfd",  "kexec_load",  "init_module", "finit_module", "delete_module", "open_by_handle_at",
        "acct",         "swapon",      "swapoff",     "reboot",       "syslog",        "clock_settime",
        "settimeofday", "personality", "clone",       "ioctl",        "socket",        "socketpair"}) {
    EXPECT_TRUE(has_rule(p, s, "EPERM")) << s;
  }
  for (const char* s : {"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}) {
    EXPECT_TRUE(has_rule(p, s, "ENOSYS")) << s;
  }
  EXPECT_TRUE(has_rule(p, "(any)", "KILL_PROCESS"));
}

TEST(DefaultPolicy, EveryRuleHasAReason) {
  SeccompProgram p = SeccompProgram::default_policy();
  for (const auto& r : p.rules()) EXPECT_FALSE(r.reason.empty()) << r.syscall;
}

TEST(DefaultPolicy, MoveKeepsProgramValid) {
  SeccompProgram a = SeccompProgram::default_policy();
  size_t n = a.instruction_count();
  SeccompProgram b(std::move(a));
  EXPECT_EQ(b.program()->len, n);
  EXPECT_NE(b.program()->filter, nullptr);
}

TEST(ForkServerPolicy, AllowsOnlyWhatAForkNeedsBeyondTheDefault) {
  SeccompProgram fork = SeccompProgram::fork_server_policy();
  SeccompProgram def = SeccompProgram::default_policy();
  // What it needs to give a run namespaces of its own.
  for (const char* s : {"unshare", "mount", "sethostname"}) {
    EXPECT_FALSE(has_rule(fork, s, "EPERM")) << s;
    EXPECT_FALSE(has_rule(fork, s, "ENOSYS")) << s;
    EXPECT_TRUE(has_rule(def, s, "EPERM")) << s;
  }
  // clone into a new user and pid namespace: the run's PID 1 is cloned
  // into them. It unshares the others itself.
  auto has_clone_rule = [](const SeccompProgram& p, const std::string& flag) {
    return std::any_of(p.rules().begin(), p.rules().end(), [&](const SeccompRuleInfo& r) {
      return r.syscall == "clone" && r.condition == "flags has " + flag;
    });
  };
  for (const char* flag : {"CLONE_NEWUSER", "CLONE_NEWPID"}) {
    EXPECT_FALSE(has_clone_rule(fork, flag)) << flag;
    EXPECT_TRUE(has_clone_rule(def, flag)) << flag;
  }
  // Everything else of the default policy stays denied: ENOSYS in the
  // kernel (SECCOMP_RET_TRACE without a tracer), which ranks below a run's
  // own notifying filter, so that a run's denied calls reach its supervisor.
  for (const auto& r : def.rules()) {
    if (r.syscall == "unshare" || r.syscall == "mount" || r.syscall == "sethostname") continue;
    if (r.condition == "flags has CLONE_NEWUSER" || r.condition == "flags has CLONE_NEWPID") continue;
    EXPECT_TRUE(has_rule(fork, r.syscall,
                         r.action == "EPERM"          ? "ENOSYS"
                         : r.action == "KILL_PROCESS" ? "ENOSYS"
                                                      : r.action))
        << r.syscall << " " << r.condition;
  }
  // No listener: each run's own filter, stacked on it, takes the one a
  // filter chain may have.
  EXPECT_FALSE(fork.notifies());
  EXPECT_TRUE(def.notifies());
}

}  // namespace
}  // namespace nsbox
