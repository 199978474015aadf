#include "nsbox/seccomp.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <vector>

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

// What the filter answers each call with, in a child that loads it without a
// listener: a call its rules refuse then fails with ENOSYS, which the kernel
// gives none of these calls, so the filter's refusal is told apart from the
// kernel's own (EPERM for want of a capability, EBADF, ENOTTY). Each call is
// {nr, a0, a1, a2, a3}; the answer is 0 for success or the errno.
std::vector<int> answers_under(const SeccompProgram& p, const std::vector<std::array<long, 5>>& calls) {
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || load_seccomp_program(p.program(), nullptr) != 0) ::_exit(1);
    std::vector<int> answers;
    for (const auto& c : calls) {
      const long r = ::syscall(c[0], c[1], c[2], c[3], c[4]);
      answers.push_back(r < 0 ? errno : 0);
      if (r > 0 && c[0] == SYS_socket) ::close(static_cast<int>(r));
    }
    const ssize_t size = static_cast<ssize_t>(answers.size() * sizeof(int));
    ::_exit(::write(out[1], answers.data(), static_cast<size_t>(size)) == size ? 0 : 2);
  }
  ::close(out[1]);
  std::vector<int> answers(calls.size(), -1);
  const ssize_t size = static_cast<ssize_t>(answers.size() * sizeof(int));
  EXPECT_EQ(::read(out[0], answers.data(), static_cast<size_t>(size)), size);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return answers;
}

constexpr long kHighJunk = 1L << 32;

TEST(DefaultPolicy, RefusesSocketsOfOtherFamiliesInTheFilterItself) {
  int pair[2];
  const auto answers = answers_under(SeccompProgram::default_policy(),
                                     {{SYS_socket, AF_VSOCK, SOCK_STREAM, 0},
                                      {SYS_socket, AF_INET, SOCK_PACKET, 0},
                                      {SYS_socket, AF_INET, SOCK_PACKET | SOCK_CLOEXEC, 0},
                                      {SYS_socket, AF_INET | kHighJunk, SOCK_STREAM, 0},
                                      {SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_AUDIT},
                                      {SYS_socketpair, AF_INET, SOCK_STREAM, 0},
                                      {SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0},
                                      {SYS_socket, AF_INET6, SOCK_DGRAM, 0},
                                      {SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE},
                                      {SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, reinterpret_cast<long>(pair)}});
  // Netlink, which every Linux has, answers EAFNOSUPPORT: its queued
  // messages are charged to no memory cgroup.
  EXPECT_EQ(answers, (std::vector<int>{ENOSYS, ENOSYS, ENOSYS, ENOSYS, EAFNOSUPPORT, ENOSYS, 0, 0, EAFNOSUPPORT, 0}));
}

// clone with each namespace flag, in the compiled filter: with CLONE_THREAD
// and no CLONE_SIGHAND, so that the kernel refuses every one itself (EINVAL)
// and nothing is ever cloned; the filter answers first. The fork server's
// own filter lets it make a run's user and pid namespaces.
TEST(EveryPolicy, RefusesCloneWithEachNamespaceFlagInTheFilterItself) {
  const std::vector<unsigned long> flags = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                            CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
  std::vector<std::array<long, 5>> calls;
  for (unsigned long flag : flags) calls.push_back({SYS_clone, static_cast<long>(flag | CLONE_THREAD), 0, 0, 0});
  calls.push_back({SYS_clone, CLONE_THREAD, 0, 0, 0});  // no namespace: the kernel's own EINVAL
  const std::vector<int> refused = {ENOSYS, ENOSYS, ENOSYS, ENOSYS, ENOSYS, ENOSYS, ENOSYS, EINVAL};
  EXPECT_EQ(answers_under(SeccompProgram::default_policy(), calls), refused);
  EXPECT_EQ(answers_under(SeccompProgram::strict_policy(), calls), refused);
  EXPECT_EQ(answers_under(SeccompProgram::fork_server_policy(), calls),
            (std::vector<int>{ENOSYS, ENOSYS, ENOSYS, EINVAL, EINVAL, ENOSYS, ENOSYS, EINVAL}));
}

// What every policy answers in the kernel, whatever else it allows: native
// AIO, memfd_secret and openat2 ENOSYS; sync and syncfs succeed doing
// nothing (the kernel would say EBADF to syncfs(-1)); O_DIRECT EINVAL (the
// kernel would say ENOENT for this path, EBADF for fd -1).
TEST(EveryPolicy, AnswersHostWideIoAndAioCallsInTheFilterItself) {
  const long path = reinterpret_cast<long>("/nsbox-no-such-file");
  const std::vector<std::array<long, 5>> calls = {{SYS_io_setup, 1, 0, 0, 0},
                                                  {SYS_io_submit, 0, 0, 0, 0},
                                                  {SYS_memfd_secret, 0, 0, 0, 0},
                                                  {SYS_process_madvise, -1, 0, 0, 21 /* MADV_PAGEOUT */},
                                                  {SYS_openat2, AT_FDCWD, path, 0, 0},
                                                  {SYS_sync, 0, 0, 0, 0},
                                                  {SYS_syncfs, -1, 0, 0, 0},
                                                  {SYS_open, path, O_RDONLY | O_DIRECT, 0, 0},
                                                  {SYS_openat, AT_FDCWD, path, O_WRONLY | O_DIRECT | kHighJunk, 0},
                                                  {SYS_fcntl, -1, F_SETFL, O_DIRECT | O_NONBLOCK, 0},
                                                  // the kernel reads the command's low 32 bits
                                                  {SYS_fcntl, -1, F_SETFL | kHighJunk, O_DIRECT, 0},
                                                  {SYS_madvise, 0, 4096, 21 /* MADV_PAGEOUT */, 0},
                                                  {SYS_madvise, 0, 4096, 21 | kHighJunk, 0},
                                                  {SYS_open, path, O_RDONLY, 0, 0},
                                                  {SYS_fcntl, -1, F_SETFL, O_NONBLOCK, 0},
                                                  {SYS_fcntl, -1, F_SETFL | kHighJunk, O_NONBLOCK, 0},
                                                  {SYS_fcntl, -1, F_GETFL, O_DIRECT, 0},
                                                  {SYS_madvise, 0, 4096, MADV_NORMAL, 0}};
  const std::vector<int> expected = {ENOSYS, ENOSYS, ENOSYS, ENOSYS, ENOSYS, 0,     0,     EINVAL, EINVAL,
                                     EINVAL, EINVAL, 0,      0,      ENOENT, EBADF, EBADF, EBADF,  ENOMEM};
  EXPECT_EQ(answers_under(SeccompProgram::default_policy(), calls), expected);
  EXPECT_EQ(answers_under(SeccompProgram::strict_policy(), calls), expected);
  EXPECT_EQ(answers_under(SeccompProgram::fork_server_policy(), calls), expected);
  // fadvise64, which strict does not list: DONTNEED does nothing where it is allowed.
  const std::vector<std::array<long, 5>> advice = {{SYS_fadvise64, -1, 0, 0, POSIX_FADV_DONTNEED},
                                                   {SYS_fadvise64, -1, 0, 0, POSIX_FADV_NORMAL}};
  EXPECT_EQ(answers_under(SeccompProgram::default_policy(), advice), (std::vector<int>{0, EBADF}));
  // The strict list and fadvise64: what the child itself needs after the
  // filter is in place (AddressSanitizer's allocator maps memory) stays.
  std::vector<std::string> with_fadvise = SeccompProgram::strict_syscalls();
  with_fadvise.push_back("fadvise64");
  EXPECT_EQ(answers_under(SeccompProgram::allow_list(with_fadvise), advice), (std::vector<int>{0, EBADF}));
}

// On a kernel with them (6.8 and later), these calls reach the kernel
// unless the filter answers: EFAULT, EINVAL or EBADF for these arguments.
TEST(DefaultPolicy, AnswersCallsNewerThanThePolicyWithEnosysInTheFilterItself) {
  const auto answers = answers_under(SeccompProgram::default_policy(), {{457, 0, 0, 0, 0},     // statmount
                                                                        {462, 1, 4096, 0, 0},  // mseal
                                                                        {467, -1, 0, 0, 0},    // open_tree_attr
                                                                        {511, 0, 0, 0, 0},
                                                                        {SYS_futex_waitv, 0, 0, 0, 0}});
  EXPECT_EQ(answers, (std::vector<int>{ENOSYS, ENOSYS, ENOSYS, ENOSYS, EINVAL}))
      << "futex_waitv, which libseccomp names, is left to the kernel";
}

// What the kernel review of 2026-12-06 found reachable, answered by every
// policy in the filter (ENOSYS here, without a listener) before the kernel
// sees it, and what stays allowed (the kernel's own answer, or success):
// huge pages, out-of-band data, multipath TCP, KSM, and a lower core limit.
TEST(EveryPolicy, RefusesHugePagesOobMptcpKsmAndALowerCoreLimitInTheFilterItself) {
  static const rlimit no_core{0, 0};
  static rlimit old_core{};
  static const char name[] = "nsbox-test";
  const long core = reinterpret_cast<long>(&no_core);
  const long old = reinterpret_cast<long>(&old_core);
  const std::vector<std::array<long, 5>> refused = {
      {SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB},
      {SYS_memfd_create, reinterpret_cast<long>(name), MFD_HUGETLB, 0, 0},
      {SYS_shmget, IPC_PRIVATE, 2 << 20, IPC_CREAT | SHM_HUGETLB, 0},
      {SYS_sendto, -1, 0, 0, MSG_OOB},
      {SYS_recvfrom, -1, 0, 0, MSG_OOB | MSG_DONTWAIT},
      {SYS_sendmsg, -1, 0, MSG_OOB, 0},
      {SYS_recvmsg, -1, 0, MSG_OOB, 0},
      {SYS_sendmmsg, -1, 0, 0, MSG_OOB},
      {SYS_recvmmsg, -1, 0, 0, MSG_OOB},
      {SYS_socket, AF_INET, SOCK_STREAM, IPPROTO_MPTCP},
      {SYS_socket, AF_INET6, SOCK_STREAM, IPPROTO_MPTCP},
      {SYS_socket, AF_INET, SOCK_STREAM, IPPROTO_TCP | kHighJunk},
      {SYS_prctl, 67 /* PR_SET_MEMORY_MERGE */, 1, 0, 0},
      {SYS_prctl, 67 | kHighJunk, 1, 0, 0},
      {SYS_setrlimit, RLIMIT_CORE, core, 0, 0},
      {SYS_prlimit64, 0, RLIMIT_CORE, core, 0},
      {SYS_prlimit64, 0, RLIMIT_CORE | kHighJunk, core, 0}};
  // The kernel's answers: an unmapped address to advise (ENOMEM), which
  // MADV_MERGEABLE is not given, length 0 (EINVAL), fd -1 (EBADF), a NULL
  // name or limit (EFAULT), a size below SHMMIN (EINVAL).
  const std::vector<std::array<long, 5>> allowed = {{SYS_madvise, 0, 4096, MADV_MERGEABLE, 0},
                                                    {SYS_madvise, 0, 4096, MADV_MERGEABLE | kHighJunk, 0},
                                                    {SYS_madvise, 0, 4096, MADV_NORMAL, 0},
                                                    {SYS_mmap, 0, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS},
                                                    {SYS_memfd_create, 0, 0, 0, 0},
                                                    {SYS_shmget, IPC_PRIVATE, 0, IPC_CREAT, 0},
                                                    {SYS_sendto, -1, 0, 0, 0},
                                                    {SYS_sendmsg, -1, 0, 0, 0},
                                                    {SYS_socket, AF_INET, SOCK_STREAM, IPPROTO_TCP},
                                                    {SYS_socket, AF_INET6, SOCK_DGRAM, 0},
                                                    {SYS_prctl, PR_GET_DUMPABLE, 0, 0, 0},
                                                    {SYS_setrlimit, RLIMIT_NOFILE, 0, 0, 0},
                                                    {SYS_prlimit64, 0, RLIMIT_CORE, 0, old},
                                                    {SYS_prlimit64, 0, RLIMIT_NOFILE, 0, old}};
  const std::vector<int> all_refused(refused.size(), ENOSYS);
  const std::vector<int> kernels = {0, 0, ENOMEM, EINVAL, EFAULT, EINVAL, EBADF, EBADF, 0, 0, 0, EFAULT, 0, 0};
  EXPECT_EQ(answers_under(SeccompProgram::default_policy(), refused), all_refused);
  EXPECT_EQ(answers_under(SeccompProgram::default_policy(), allowed), kernels);
  EXPECT_EQ(answers_under(SeccompProgram::strict_policy(), refused), all_refused);
  // strict lists neither memfd_create, shmget nor setrlimit.
  EXPECT_EQ(answers_under(SeccompProgram::strict_policy(), allowed),
            (std::vector<int>{0, 0, ENOMEM, EINVAL, ENOSYS, ENOSYS, EBADF, EBADF, 0, 0, 0, ENOSYS, 0, 0}));
  // Under the fork server's too: its runs inherit its core limit, and no
  // process in it may change it.
  EXPECT_EQ(answers_under(SeccompProgram::fork_server_policy(), refused), all_refused);
}

// An allow list reads ioctl's request as the kernel does, by its low 32
// bits: TIOCSTI with junk above them is still TIOCSTI (it injected input
// into the caller's terminal under `strict` before), and any other request
// with junk still passes to the kernel (EBADF here).
TEST(StrictPolicy, RefusesTheTerminalIoctlsWhateverTheUpperBitsAndSocketsOfOtherFamilies) {
  const auto answers = answers_under(SeccompProgram::strict_policy(),
                                     {{SYS_ioctl, -1, TIOCSTI, 0},
                                      {SYS_ioctl, -1, TIOCSTI | kHighJunk, 0},
                                      {SYS_ioctl, -1, static_cast<long>(TIOCLINUX | 0xffffffff00000000ul), 0},
                                      {SYS_socket, AF_VSOCK, SOCK_STREAM, 0},
                                      {SYS_socket, AF_INET, SOCK_PACKET, 0},
                                      {SYS_ioctl, -1, FIONREAD, 0},
                                      {SYS_ioctl, -1, FIONREAD | kHighJunk, 0},
                                      {SYS_ioctl, -1, 0, 0},
                                      {SYS_ioctl, -1, 0xffffffffL, 0},
                                      {SYS_ioctl, -1, TIOCSTI + 1, 0},
                                      {SYS_socket, AF_INET, SOCK_DGRAM, 0},
                                      {SYS_socket, AF_UNIX, SOCK_STREAM, 0}});
  EXPECT_EQ(answers,
            (std::vector<int>{ENOSYS, ENOSYS, ENOSYS, ENOSYS, ENOSYS, EBADF, EBADF, EBADF, EBADF, EBADF, 0, 0}));
}

}  // namespace
}  // namespace nsbox
