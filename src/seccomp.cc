#include "nsbox/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "nsbox/error.h"
#include "nsbox/run_spec.h"
#include "nsbox/unique_fd.h"

// libseccomp's SCMP_CMP macros leave datum_b to zero-initialisation, which
// clang (the fuzzing build) reports.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace nsbox {
namespace {

struct DenyRule {
  const char* syscall;
  int err;
  const char* reason;
};

// Calls denied outright. Each answers EPERM (a refused privilege) unless the
// caller should fall back to an older interface, which ENOSYS tells it to do.
constexpr DenyRule kDenyRules[] = {
    {"ptrace", EPERM, "inspecting or steering other processes"},
    {"process_vm_readv", EPERM, "reading another process's memory"},
    {"process_vm_writev", EPERM, "writing another process's memory"},
    {"mount", EPERM, "changing the filesystem view the sandbox was given"},
    {"umount2", EPERM, "uncovering what the masks hide"},
    {"pivot_root", EPERM, "changing the root"},
    {"chroot", EPERM, "chroot tricks against the root"},
    {"fsopen", EPERM, "new mount API"},
    {"fsconfig", EPERM, "new mount API"},
    {"fsmount", EPERM, "new mount API"},
    {"fspick", EPERM, "new mount API"},
    {"move_mount", EPERM, "new mount API"},
    {"open_tree", EPERM, "new mount API: cloning mounts"},
    {"mount_setattr", EPERM, "new mount API: clearing read-only"},
    {"unshare", EPERM, "new namespaces: kernel attack surface of nested user namespaces"},
    {"setns", EPERM, "joining other namespaces"},
    {"keyctl", EPERM, "the kernel keyring is not namespaced"},
    {"add_key", EPERM, "the kernel keyring is not namespaced"},
    {"request_key", EPERM, "the kernel keyring is not namespaced"},
    {"bpf", EPERM, "eBPF programs: large kernel attack surface"},
    {"perf_event_open", EPERM, "performance counters leak host activity"},
    {"userfaultfd", EPERM, "a classic aid to kernel race exploits"},
    {"kexec_load", EPERM, "replacing the kernel"},
    {"kexec_file_load", EPERM, "replacing the kernel"},
    {"init_module", EPERM, "loading kernel modules"},
    {"finit_module", EPERM, "loading kernel modules"},
    {"delete_module", EPERM, "unloading kernel modules"},
    {"open_by_handle_at", EPERM, "opening host files by handle bypasses the mount view"},
    {"name_to_handle_at", EPERM, "file handles identify host inodes"},
    {"acct", EPERM, "process accounting is host-wide"},
    {"swapon", EPERM, "swap is host-wide"},
    {"swapoff", EPERM, "swap is host-wide"},
    {"reboot", EPERM, "rebooting"},
    {"syslog", EPERM, "the kernel log leaks host addresses and activity"},
    {"settimeofday", EPERM, "the clock is host-wide"},
    {"clock_settime", EPERM, "the clock is host-wide"},
    {"clock_adjtime", EPERM, "the clock is host-wide"},
    {"adjtimex", EPERM, "the clock is host-wide"},
    {"quotactl", EPERM, "filesystem quotas are host-wide"},
    {"quotactl_fd", EPERM, "filesystem quotas are host-wide"},
    {"lookup_dcookie", EPERM, "profiling interface that names host paths"},
    {"iopl", EPERM, "raw port I/O"},
    {"ioperm", EPERM, "raw port I/O"},
    {"uselib", EPERM, "obsolete loader with a history of bugs"},
    {"modify_ldt", EPERM, "per-process segment descriptors: a source of kernel bugs no runtime uses"},
    {"vhangup", EPERM, "hanging up terminals"},
    {"sethostname", EPERM, "the hostname is set by nsbox"},
    {"setdomainname", EPERM, "the domain name is set by nsbox"},
    {"clone3", ENOSYS, "its flags live in memory seccomp cannot inspect; glibc and libuv fall back to clone"},
    {"io_uring_setup", ENOSYS, "io_uring bypasses seccomp and is a frequent source of kernel bugs"},
    {"io_uring_enter", ENOSYS, "io_uring bypasses seccomp and is a frequent source of kernel bugs"},
    {"io_uring_register", ENOSYS, "io_uring bypasses seccomp and is a frequent source of kernel bugs"},
    {"io_setup", ENOSYS, "native AIO contexts are counted host-wide (fs.aio-max-nr): one run could take them all"},
    {"io_destroy", ENOSYS, "native AIO, as io_setup"},
    {"io_submit", ENOSYS, "native AIO, as io_setup"},
    {"io_cancel", ENOSYS, "native AIO, as io_setup"},
    {"io_getevents", ENOSYS, "native AIO, as io_setup"},
    {"io_pgetevents", ENOSYS, "native AIO, as io_setup"},
    {"memfd_secret", ENOSYS, "each secret page splits the kernel's direct map for good"},
    {"process_madvise", ENOSYS, "advice through a pidfd, past the madvise rules (MADV_PAGEOUT); no runtime uses it"},
    {"openat2", ENOSYS, "its flags live in memory seccomp cannot inspect (O_DIRECT); glibc and runtimes use openat"},
};

// Calls that answer success and do nothing: sync flushes every filesystem
// of the host; nothing of a run's needs it (its tmpfs has no disk, and what
// it writes to a host directory reaches the disk with the host's writeback).
constexpr const char* kNoOpCalls[] = {"sync", "syncfs"};
constexpr const char* kNoOpReason = "flushing the host's filesystems: a way to load the host's disks";

// O_DIRECT reads and writes go to the disk each time, past the page cache
// and past any memory limit: unthrottled host I/O. open, openat and
// fcntl(F_SETFL) with it answer EINVAL, as a filesystem without it does.
constexpr const char* kDirectIoReason = "O_DIRECT bypasses the page cache: each read goes to the host's disk";
// Huge pages come from the host's hugetlb pool (or, with overcommit, its
// memory), which no run's memory cgroup is charged for.
constexpr const char* kHugePagesReason = "huge pages come from the host's pool, outside the run's memory limit";
// MSG_OOB on unix sockets is the path of CVE-2025-38236, used to go from a
// browser's sandbox to the kernel; no runtime sends urgent data.
constexpr const char* kOutOfBandReason = "out-of-band data: a unix socket path with recent kernel exploits";

// Calls refused when a flag argument has one flag; its other uses are
// allowed. Each call has one such rule: an allow list allows the call when
// the flag is clear.
struct FlagRule {
  const char* call;
  unsigned arg;
  uint64_t flag;
  int err;  // EINVAL: as a kernel or filesystem without it would; EPERM: refused
  const char* condition;
  const char* reason;
};
constexpr FlagRule kFlagRules[] = {
    {"open", 1, O_DIRECT, EINVAL, "flags has O_DIRECT", kDirectIoReason},
    {"openat", 2, O_DIRECT, EINVAL, "flags has O_DIRECT", kDirectIoReason},
    {"mmap", 3, MAP_HUGETLB, EPERM, "flags has MAP_HUGETLB", kHugePagesReason},
    {"memfd_create", 1, MFD_HUGETLB, EPERM, "flags has MFD_HUGETLB", kHugePagesReason},
    {"shmget", 2, SHM_HUGETLB, EPERM, "flags has SHM_HUGETLB", kHugePagesReason},
    {"sendto", 3, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
    {"recvfrom", 3, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
    {"sendmsg", 2, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
    {"recvmsg", 2, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
    {"sendmmsg", 3, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
    {"recvmmsg", 3, MSG_OOB, EPERM, "flags has MSG_OOB", kOutOfBandReason},
};

constexpr const char* kDropCacheReason = "dropping a file's cached pages makes each read go to the host's disk";
// Pages KSM merges across runs tell one run what another holds (a write to
// a merged page takes longer), and KSM is off unless a process opts in.
constexpr const char* kMergeReason = "KSM merging pages across runs is a side channel between tenants";
// With RLIMIT_CORE at 1 the kernel aborts every dump, a piped one (to a
// host helper that runs as root: systemd-coredump, apport) included; at 0
// a pipe would still get the crashed process's memory.
constexpr const char* kCoreLimitReason =
    "a lower core limit (0) would let a crash dump the run's memory to the host's core_pattern helper";
constexpr uint32_t kMadvPageout = 21;       // MADV_PAGEOUT, which Debian 12's headers lack
constexpr uint32_t kPrSetMemoryMerge = 67;  // PR_SET_MEMORY_MERGE (Linux 6.4), likewise

// Calls answered in the filter when one int argument (its low 32 bits, all
// the kernel reads) has one value; its other values are allowed.
struct ValueRule {
  const char* call;
  unsigned arg;
  uint32_t value;
  int err;  // 0: success, nothing done; EPERM: refused
  const char* condition;
  const char* reason;
};
constexpr ValueRule kValueRules[] = {
    // Advice that drops cached pages of a file, so that each read of it goes
    // to the host's disk again, succeeds and does nothing; MADV_PAGEOUT only
    // of a file the sandbox user owns (a host directory bound rw).
    {"fadvise64", 3, POSIX_FADV_DONTNEED, 0, "advice is POSIX_FADV_DONTNEED", kDropCacheReason},
    {"madvise", 2, kMadvPageout, 0, "advice is MADV_PAGEOUT", kDropCacheReason},
    {"madvise", 2, MADV_MERGEABLE, 0, "advice is MADV_MERGEABLE", kMergeReason},
    {"prctl", 0, kPrSetMemoryMerge, EPERM, "option is PR_SET_MEMORY_MERGE", kMergeReason},
    {"setrlimit", 0, RLIMIT_CORE, EPERM, "resource is RLIMIT_CORE", kCoreLimitReason},
};
// An int argument as the kernel reads it: its low 32 bits.
constexpr uint64_t kLowWord = 0xffffffffull;

// Namespace flags that clone(2) may not carry: a nested namespace is kernel
// attack surface the workload has no use for.
constexpr std::pair<unsigned long, const char*> kCloneNamespaceFlags[] = {
    {CLONE_NEWNS, "CLONE_NEWNS"},         {CLONE_NEWUTS, "CLONE_NEWUTS"}, {CLONE_NEWIPC, "CLONE_NEWIPC"},
    {CLONE_NEWUSER, "CLONE_NEWUSER"},     {CLONE_NEWPID, "CLONE_NEWPID"}, {CLONE_NEWNET, "CLONE_NEWNET"},
    {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
};

// Terminal ioctls that push input into, or steer, a terminal the sandbox may
// share with a user's shell; TIOCSETD swaps its line discipline (N_NULL
// leaves it dead: tcgetattr fails, so neither `stty sane` nor `reset` helps).
constexpr std::pair<unsigned long, const char*> kDeniedIoctls[] = {
    {TIOCSTI, "TIOCSTI"},
    {TIOCLINUX, "TIOCLINUX"},
    {TIOCSETD, "TIOCSETD"},
};

// The socket families a run may use: unix sockets and IP (its network
// namespace holds only lo, and the egress proxy's path when a profile
// allows egress). Every other family is kernel attack surface no run needs
// (AF_ALG, RDS, TIPC, CAN, ...), and AF_VSOCK is not confined by the network
// namespace at all: on a VM host it reaches the hypervisor and its other
// guests.
constexpr int kSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6};
constexpr const char* kSocketFamiliesText = "AF_UNIX, AF_INET, AF_INET6";
// Netlink answers EAFNOSUPPORT, in the kernel, as a kernel without it would:
// its queued messages are charged to no memory cgroup (a run held a GiB of
// them under a 64 MiB limit), and glibc (getaddrinfo, which opens one to
// sort addresses) goes on without it.
constexpr const char* kNetlinkReason = "netlink's queued messages are charged to no memory cgroup";
// socket(2)'s type without SOCK_NONBLOCK and SOCK_CLOEXEC (the kernel's
// SOCK_TYPE_MASK).
constexpr uint64_t kSocketTypeMask = 0xf;
// The types an allow list lets IPv4 sockets have: not SOCK_PACKET.
constexpr int kInetSocketTypes[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET};
// IP sockets' protocols are IP's protocol numbers, below 256, but for
// IPPROTO_MPTCP (262): multipath TCP, a large and young part of the kernel
// no run needs. Compared on all 64 bits, so that junk above a protocol's
// low word (all the kernel reads) is refused too.
constexpr uint64_t kIpProtocolEnd = 256;
constexpr const char* kMptcpReason = "multipath TCP is kernel attack surface no run needs";

// Syscall numbers above the newest this libseccomp names, up to this one,
// answer ENOSYS in a deny list: calls added to the kernel after the policy
// was written (statmount, mseal, open_tree_attr, ...) are surface no rule
// has weighed, and runtimes fall back from ENOSYS. Beyond it the x32 and
// foreign-ABI rules, and the kernel's own ENOSYS, take over.
constexpr int kNewestDeniedNr = 511;
// The newest call this policy has weighed (futex_requeue, Linux 6.7): a
// libseccomp that names newer ones (2.6 names statmount, mseal, ...) must
// not let them through unweighed.
constexpr int kNewestWeighedNr = 456;

// personality(0xffffffff) only queries; any other value changes the execution
// domain (e.g. ADDR_NO_RANDOMIZE turns off ASLR).
constexpr uint32_t kPersonalityQuery = 0xffffffffu;

using FilterCtx = std::unique_ptr<void, decltype(&seccomp_release)>;

void check(int rc, const std::string& what) {
  if (rc < 0) throw SysError("seccomp", what, -rc);
}

int resolve(const char* name) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) throw SysError("seccomp resolve", name, EINVAL);
  return nr;
}

std::vector<sock_filter> export_bpf(scmp_filter_ctx ctx) {
  UniqueFd fd(::memfd_create("nsbox-seccomp", MFD_CLOEXEC));
  if (!fd) throw SysError("memfd_create", "nsbox-seccomp", errno);
  check(seccomp_export_bpf(ctx, fd.get()), "export bpf");
  off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) throw SysError("seccomp", "export bpf size", EINVAL);
  std::vector<sock_filter> filter(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(fd.get(), filter.data(), static_cast<size_t>(size), 0) != size)
    throw SysError("read", "exported seccomp program", errno ? errno : EIO);
  return filter;
}

}  // namespace

SeccompProgram::SeccompProgram(SeccompProgram&& other) noexcept
    : filter_(std::move(other.filter_)), rules_(std::move(other.rules_)), notifies_(other.notifies_) {
  prog_.len = static_cast<unsigned short>(filter_.size());
  prog_.filter = filter_.data();
}

namespace {

// A filter with default_action and the rules every policy starts with.
FilterCtx new_filter(uint32_t default_action, const char* what, std::vector<SeccompRuleInfo>& rules, bool notifies) {
  FilterCtx ctx(seccomp_init(default_action), &seccomp_release);
  if (!ctx) throw SysError("seccomp_init", what, ENOMEM);
  // Syscalls of another ABI (i386 via int 0x80, x32) bypass a filter written
  // for x86_64 numbers: never run. With a supervisor listening they go to it,
  // which names the call in the Result and kills the whole run (the call
  // never returns); without one, the kernel kills the process.
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, notifies ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS),
        "badarch");
  // nsbox sets no_new_privs itself; the exported program must not assume it.
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0), "nnp");
  rules.push_back(
      {"(any)", "architecture is not x86_64 (i386, x32)", "KILL_PROCESS",
       "another ABI's syscall numbers would bypass this filter; the run is killed and the Result names the call"});
  return ctx;
}

// EPERM rules go to the supervisor (user notification), which answers
// kDeniedErrno and records the call for the Result; ENOSYS rules answer in
// the kernel, since runtimes hit them on every start and fall back.
uint32_t deny_action(int err) { return err == EPERM ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(err); }

}  // namespace

void SeccompProgram::finish(void* ctx) {
  filter_ = export_bpf(static_cast<scmp_filter_ctx>(ctx));
  prog_.len = static_cast<unsigned short>(filter_.size());
  prog_.filter = filter_.data();
}

SeccompProgram SeccompProgram::default_policy() { return deny_list({}, true); }

SeccompProgram SeccompProgram::fork_server_policy() {
  // What the fork server does to put a run into namespaces of its own
  // (docs/SECURITY.md, "Fork server"): clone into a new user and pid
  // namespace, then unshare (the others), mount and sethostname in the
  // run's PID 1.
  // Without a listener, so that each run's filter, stacked on this one, can
  // have its own.
  // Its PID 1 also sets the run's rlimits, all but RLIMIT_CORE, which a run
  // inherits from the fork server and which nothing in it may change.
  return deny_list({"clone CLONE_NEWUSER", "clone CLONE_NEWPID", "unshare", "mount", "sethostname"}, false);
}

namespace {

// Without a listener, a denied call is SECCOMP_RET_TRACE: with no tracer
// (ptrace is denied to everyone inside) it fails with ENOSYS. Unlike ERRNO
// and KILL, TRACE ranks below USER_NOTIF, so where a run's own filter is
// stacked on this one, that filter's answer (its supervisor's EPERM, with
// the call counted) wins.
uint32_t quiet_deny_action(int err) {
  return err == EPERM ? SCMP_ACT_TRACE(0) : SCMP_ACT_ERRNO(static_cast<uint32_t>(err));
}

constexpr const char* kSocketFamilyReason =
    "vsock reaches past the network namespace; other families are kernel attack surface";

// Adds a rule with `action` (a denial) to syscall for every value of its
// argument `arg` but those in `except`: one below the lowest, one above the
// highest, one per value between them (libseccomp takes one comparison per
// argument and rule). The comparisons are on all 64 bits, so a value with
// junk in its upper half, which the kernel would read as its low half, is
// above the highest and denied too: fail closed.
void deny_arg_except(scmp_filter_ctx ctx, uint32_t action, const char* syscall, unsigned arg,
                     const std::vector<uint32_t>& except) {
  const int nr = resolve(syscall);
  const uint32_t low = *std::min_element(except.begin(), except.end());
  const uint32_t high = *std::max_element(except.begin(), except.end());
  if (low > 0) check(seccomp_rule_add(ctx, action, nr, 1, SCMP_CMP64(arg, SCMP_CMP_LT, low)), syscall);
  check(seccomp_rule_add(ctx, action, nr, 1, SCMP_CMP64(arg, SCMP_CMP_GT, high)), syscall);
  for (uint32_t value = low + 1; value < high; ++value) {
    if (std::find(except.begin(), except.end(), value) == except.end())
      check(seccomp_rule_add(ctx, action, nr, 1, SCMP_CMP64(arg, SCMP_CMP_EQ, value)), syscall);
  }
}

// Allows syscall for every value of its argument `arg` whose low 32 bits
// (all the kernel reads of an int or unsigned int argument) are not in
// `except`, whatever the upper half holds: a plain "greater than" would let
// TIOCSTI | 1 << 32 through as a large value, and the kernel would run it as
// TIOCSTI. The allowed low words are covered by aligned power-of-two blocks,
// each one masked comparison that ignores the upper half.
void allow_low_word_except(scmp_filter_ctx ctx, const char* syscall, unsigned arg, std::vector<uint32_t> except) {
  const int nr = resolve(syscall);
  std::sort(except.begin(), except.end());
  auto allow_range = [&](uint64_t first, uint64_t last) {  // inclusive, within [0, 2^32)
    while (first <= last) {
      uint64_t size = first == 0 ? (1ull << 32) : (first & (~first + 1));  // the alignment of first
      while (first + size - 1 > last) size >>= 1;
      const uint64_t mask = 0xffffffffull & ~(size - 1);
      check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, mask, first)), syscall);
      first += size;
    }
  };
  uint64_t next = 0;
  for (const uint32_t value : except) {
    if (value > next) allow_range(next, value - 1ull);
    next = value + 1ull;
  }
  if (next <= 0xffffffffull) allow_range(next, 0xffffffffull);
}

void add_netlink_refusal(scmp_filter_ctx ctx) {
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), resolve("socket"), 1, SCMP_A0_64(SCMP_CMP_EQ, AF_NETLINK)),
        "socket netlink");
}

// How a policy refuses a call: the action for EPERM (its supervisor's,
// where it has one) and what its rule table calls that.
struct Refusal {
  uint32_t action;
  const char* text;
};

// The rules every policy has, whatever it allows: the no-op calls, the flag
// and value rules, O_DIRECT through fcntl and lowering the core limit
// refused. `allow_rest` (allow lists) adds the calls' other uses as allowed,
// when the list has them.
void add_common_rules(scmp_filter_ctx ctx, std::vector<SeccompRuleInfo>& rules, const std::set<std::string>* allow_rest,
                      const Refusal& refusal) {
  auto listed = [&](const char* call) { return !allow_rest || allow_rest->count(call) > 0; };
  auto answer = [&](int err) { return err == EPERM ? refusal.action : SCMP_ACT_ERRNO(static_cast<uint32_t>(err)); };
  // An allow list refuses with EPERM by default: a rule of that action is
  // the default's (libseccomp refuses to add it), and the allow rules
  // leave it out.
  auto add_answer = [&](int err, const char* call, const scmp_arg_cmp& cmp) {
    if (!(allow_rest && err == EPERM)) check(seccomp_rule_add(ctx, answer(err), resolve(call), 1, cmp), call);
  };
  auto answer_text = [&](int err) -> std::string {
    return err == 0 ? "success, nothing done" : err == EPERM ? refusal.text : "EINVAL";
  };
  for (const char* call : kNoOpCalls) {
    check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(0), resolve(call), 0), call);
    rules.push_back({call, "", "success, nothing done", kNoOpReason});
  }
  for (const auto& rule : kFlagRules) {
    if (!listed(rule.call)) continue;
    add_answer(rule.err, rule.call, SCMP_CMP64(rule.arg, SCMP_CMP_MASKED_EQ, rule.flag, rule.flag));
    if (allow_rest)
      check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, resolve(rule.call), 1,
                             SCMP_CMP64(rule.arg, SCMP_CMP_MASKED_EQ, rule.flag, 0)),
            rule.call);
    rules.push_back({rule.call, rule.condition, answer_text(rule.err), rule.reason});
  }
  // The kernel reads fcntl's command as an unsigned int: F_SETFL with junk
  // above it is F_SETFL, so the command is compared by its low 32 bits.
  if (listed("fcntl")) {
    check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), resolve("fcntl"), 2,
                           SCMP_A1_64(SCMP_CMP_MASKED_EQ, kLowWord, F_SETFL),
                           SCMP_A2_64(SCMP_CMP_MASKED_EQ, O_DIRECT, O_DIRECT)),
          "fcntl");
    if (allow_rest) {
      allow_low_word_except(ctx, "fcntl", 1, {F_SETFL});
      check(
          seccomp_rule_add(ctx, SCMP_ACT_ALLOW, resolve("fcntl"), 2, SCMP_A1_64(SCMP_CMP_MASKED_EQ, kLowWord, F_SETFL),
                           SCMP_A2_64(SCMP_CMP_MASKED_EQ, O_DIRECT, 0)),
          "fcntl");
    }
    rules.push_back({"fcntl", "command is F_SETFL, flags has O_DIRECT", "EINVAL", kDirectIoReason});
  }
  // An allow list allows each call's argument's other values, in one go.
  std::map<std::pair<std::string, unsigned>, std::vector<uint32_t>> answered;
  for (const auto& rule : kValueRules) {
    if (!listed(rule.call)) continue;
    add_answer(rule.err, rule.call, SCMP_CMP64(rule.arg, SCMP_CMP_MASKED_EQ, kLowWord, rule.value));
    answered[{rule.call, rule.arg}].push_back(rule.value);
    rules.push_back({rule.call, rule.condition, answer_text(rule.err), rule.reason});
  }
  if (allow_rest)
    for (const auto& [call, values] : answered) allow_low_word_except(ctx, call.first.c_str(), call.second, values);
  // prlimit64 may read RLIMIT_CORE (getrlimit is prlimit64 with no new
  // limit), not set it.
  if (listed("prlimit64")) {
    if (!allow_rest)
      check(seccomp_rule_add(ctx, refusal.action, resolve("prlimit64"), 2,
                             SCMP_A1_64(SCMP_CMP_MASKED_EQ, kLowWord, RLIMIT_CORE), SCMP_A2_64(SCMP_CMP_NE, 0)),
            "prlimit64");
    if (allow_rest) {
      allow_low_word_except(ctx, "prlimit64", 1, {RLIMIT_CORE});
      check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, resolve("prlimit64"), 2,
                             SCMP_A1_64(SCMP_CMP_MASKED_EQ, kLowWord, RLIMIT_CORE), SCMP_A2_64(SCMP_CMP_EQ, 0)),
            "prlimit64");
    }
    rules.push_back({"prlimit64", "resource is RLIMIT_CORE, a new limit is given", refusal.text, kCoreLimitReason});
  }
}

// The highest x86_64 syscall number libseccomp has a name for.
int newest_known_syscall() {
  int newest = 0;
  for (int nr = 0; nr <= kNewestDeniedNr; ++nr) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
    if (name) newest = nr;
    std::free(name);
  }
  return newest;
}

// socket(2) of a family outside kSocketFamilies or of AF_INET with
// SOCK_PACKET (which the kernel turns into a packet socket), and
// socketpair(2) of anything but AF_UNIX get `action`; netlink gets
// EAFNOSUPPORT.
void deny_other_socket_families(scmp_filter_ctx ctx, uint32_t action) {
  std::vector<uint32_t> except(std::begin(kSocketFamilies), std::end(kSocketFamilies));
  except.push_back(AF_NETLINK);  // its own answer, below
  deny_arg_except(ctx, action, "socket", 0, except);
  add_netlink_refusal(ctx);
  check(seccomp_rule_add(ctx, action, resolve("socket"), 2, SCMP_A0_32(SCMP_CMP_EQ, AF_INET),
                         SCMP_A1_64(SCMP_CMP_MASKED_EQ, kSocketTypeMask, SOCK_PACKET)),
        "socket SOCK_PACKET");
  for (const int family : {AF_INET, AF_INET6})
    check(seccomp_rule_add(ctx, action, resolve("socket"), 2, SCMP_A0_32(SCMP_CMP_EQ, family),
                           SCMP_A2_64(SCMP_CMP_GE, kIpProtocolEnd)),
          "socket protocol");
  deny_arg_except(ctx, action, "socketpair", 0, {AF_UNIX});
}

}  // namespace

SeccompProgram SeccompProgram::deny_list(const std::set<std::string>& allowed, bool notifies) {
  SeccompProgram program;
  auto& rules = program.rules_;
  program.notifies_ = notifies;
  FilterCtx ctx = new_filter(SCMP_ACT_ALLOW, "default policy", rules, notifies);
  auto action = [&](int err) { return notifies ? deny_action(err) : quiet_deny_action(err); };
  if (!notifies) {
    // Calls of another ABI likewise: a run's filter names them and ends the run.
    check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRACE(0)), "badarch");
    rules.back() = {"(any)", "architecture is not x86_64 (i386, x32)", "ENOSYS",
                    "another ABI's syscall numbers would bypass this filter"};
  }
  const char* eperm = notifies ? "EPERM" : "ENOSYS";

  for (const auto& rule : kDenyRules) {
    if (allowed.count(rule.syscall)) continue;
    check(seccomp_rule_add(ctx.get(), action(rule.err), resolve(rule.syscall), 0), rule.syscall);
    rules.push_back({rule.syscall, "", rule.err == EPERM ? eperm : "ENOSYS", rule.reason});
  }
  for (const auto& [flag, name] : kCloneNamespaceFlags) {
    if (allowed.count(std::string("clone ") + name)) continue;
    check(seccomp_rule_add(ctx.get(), action(EPERM), resolve("clone"), 1, SCMP_A0_64(SCMP_CMP_MASKED_EQ, flag, flag)),
          std::string("clone ") + name);
    rules.push_back({"clone", std::string("flags has ") + name, eperm, "nested namespaces are kernel attack surface"});
  }
  for (const auto& [request, name] : kDeniedIoctls) {
    check(seccomp_rule_add(ctx.get(), action(EPERM), resolve("ioctl"), 1,
                           SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffu, request)),
          std::string("ioctl ") + name);
    rules.push_back(
        {"ioctl", std::string("request is ") + name, eperm, "injecting input into or steering a shared terminal"});
  }
  const int newest_known = std::min(newest_known_syscall(), kNewestWeighedNr);
  for (int nr = newest_known + 1; nr <= kNewestDeniedNr; ++nr)
    check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), nr, 0), "syscall " + std::to_string(nr));
  rules.push_back({"(newer)", "number above 456 (futex_requeue; lower where libseccomp names fewer), up to 511",
                   "ENOSYS", "calls newer than the policy are kernel surface no rule has weighed; runtimes fall back"});
  deny_other_socket_families(ctx.get(), action(EPERM));
  rules.push_back(
      {"socket", std::string("family is not ") + kSocketFamiliesText + " or AF_NETLINK", eperm, kSocketFamilyReason});
  rules.push_back({"socket", "family is AF_NETLINK", "EAFNOSUPPORT", kNetlinkReason});
  rules.push_back({"socket", "family is AF_INET, type is SOCK_PACKET", eperm, "a packet socket under another name"});
  rules.push_back(
      {"socket", "family is AF_INET or AF_INET6, protocol is 256 or above (IPPROTO_MPTCP)", eperm, kMptcpReason});
  rules.push_back({"socketpair", "family is not AF_UNIX", eperm, kSocketFamilyReason});
  check(
      seccomp_rule_add(ctx.get(), action(EPERM), resolve("personality"), 1, SCMP_A0_32(SCMP_CMP_NE, kPersonalityQuery)),
      "personality");
  rules.push_back({"personality", "persona is not 0xffffffff (query)", eperm,
                   "changing the execution domain, e.g. disabling ASLR"});
  add_common_rules(ctx.get(), rules, nullptr, Refusal{action(EPERM), eperm});

  program.finish(ctx.get());
  return program;
}

namespace {

bool must_deny(const std::string& name, int* err) {
  for (const auto& rule : kDenyRules) {
    if (name == rule.syscall) {
      *err = rule.err;
      return true;
    }
  }
  return false;
}

// Calls add_common_rules answers for, or allows only in part.
bool is_common_rule_call(const std::string& name) {
  for (const char* call : kNoOpCalls)
    if (name == call) return true;
  for (const auto& rule : kFlagRules)
    if (name == rule.call) return true;
  for (const auto& rule : kValueRules)
    if (name == rule.call) return true;
  return name == "fcntl" || name == "prlimit64";
}

unsigned long namespace_flag_mask() {
  unsigned long mask = 0;
  for (const auto& [flag, name] : kCloneNamespaceFlags) mask |= flag;
  return mask;
}

}  // namespace

SeccompProgram SeccompProgram::allow_list(const std::vector<std::string>& syscalls) {
  SeccompProgram program;
  auto& rules = program.rules_;
  program.notifies_ = allow_list_notifies(syscalls);
  FilterCtx ctx = new_filter(program.notifies_ ? deny_action(EPERM) : SCMP_ACT_ERRNO(EPERM), "allow list", rules,
                             program.notifies_);
  rules.push_back({"(any)", "not in the allow list", "EPERM", "only what the profile allows"});
  // Runtimes fall back from these on ENOSYS, never on EPERM.
  for (const auto& rule : kDenyRules) {
    if (rule.err == ENOSYS) {
      check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), resolve(rule.syscall), 0), rule.syscall);
      rules.push_back({rule.syscall, "", "ENOSYS", rule.reason});
    }
  }
  const std::set<std::string> listed(syscalls.begin(), syscalls.end());
  add_common_rules(ctx.get(), rules, &listed,
                   Refusal{program.notifies_ ? deny_action(EPERM) : SCMP_ACT_ERRNO(EPERM), "EPERM"});
  std::set<std::string> seen;
  for (const auto& name : syscalls) {
    if (!seen.insert(name).second) continue;
    if (seccomp_syscall_resolve_name(name.c_str()) == __NR_SCMP_ERROR)
      throw SysError("seccomp allow list", "unknown syscall " + name, EINVAL);
    int err = 0;
    if (must_deny(name, &err)) continue;      // nsbox's deny rules win over any list
    if (is_common_rule_call(name)) continue;  // add_common_rules allowed what it may
    if (name == "clone") {
      check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("clone"), 1,
                             SCMP_A0_64(SCMP_CMP_MASKED_EQ, namespace_flag_mask(), 0)),
            "clone");
      rules.push_back({"clone", "flags has no namespace flag", "ALLOW", "threads and processes"});
    } else if (name == "ioctl") {
      std::vector<uint32_t> denied;
      for (const auto& [request, request_name] : kDeniedIoctls) denied.push_back(static_cast<uint32_t>(request));
      allow_low_word_except(ctx.get(), "ioctl", 1, denied);
      rules.push_back({"ioctl", "request (its low 32 bits) is not TIOCSTI, TIOCLINUX or TIOCSETD", "ALLOW",
                       "terminal and device control"});
    } else if (name == "socket") {
      add_netlink_refusal(ctx.get());
      rules.push_back({"socket", "family is AF_NETLINK", "EAFNOSUPPORT", kNetlinkReason});
      for (const int family : kSocketFamilies) {
        if (family == AF_INET) {
          for (const int type : kInetSocketTypes)
            check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("socket"), 3, SCMP_A0_32(SCMP_CMP_EQ, AF_INET),
                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, kSocketTypeMask, static_cast<uint64_t>(type)),
                                   SCMP_A2_64(SCMP_CMP_LT, kIpProtocolEnd)),
                  "socket AF_INET");
        } else if (family == AF_INET6) {
          check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("socket"), 2, SCMP_A0_32(SCMP_CMP_EQ, family),
                                 SCMP_A2_64(SCMP_CMP_LT, kIpProtocolEnd)),
                "socket AF_INET6");
        } else {
          check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("socket"), 1, SCMP_A0_32(SCMP_CMP_EQ, family)),
                "socket");
        }
      }
      rules.push_back({"socket",
                       std::string("family is ") + kSocketFamiliesText +
                           " (AF_INET: not SOCK_PACKET; AF_INET and AF_INET6: protocol below 256)",
                       "ALLOW", kSocketFamilyReason});
    } else if (name == "socketpair") {
      check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("socketpair"), 1, SCMP_A0_32(SCMP_CMP_EQ, AF_UNIX)),
            "socketpair");
      rules.push_back({"socketpair", "family is AF_UNIX", "ALLOW", kSocketFamilyReason});
    } else if (name == "personality") {
      check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve("personality"), 1,
                             SCMP_A0_32(SCMP_CMP_EQ, kPersonalityQuery)),
            "personality");
      rules.push_back({"personality", "persona is 0xffffffff (query)", "ALLOW", "reading the execution domain"});
    } else {
      check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, resolve(name.c_str()), 0), name);
      rules.push_back({name, "", "ALLOW", "in the allow list"});
    }
  }
  program.finish(ctx.get());
  return program;
}

const std::vector<std::string>& SeccompProgram::strict_syscalls() {
  // What python3 (threads, asyncio, subprocess, numpy) and node 20 use, found
  // by running the runners' test table under this list; each addition over
  // the platform's own allow list is there because a case failed without it.
  // clang-format off
  static const std::vector<std::string> list = {
      // memory
      "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mbind", "pkey_alloc", "membarrier",
      // files
      "read", "write", "readv", "writev", "pread64", "pwrite64", "open", "openat", "close", "close_range",
      "lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "access", "faccessat", "faccessat2",
      "readlink", "readlinkat", "getcwd", "chdir", "fchdir", "getdents64", "fcntl", "dup", "dup2", "dup3",
      "mkdir", "mkdirat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "rmdir", "ftruncate",
      "fsync", "fdatasync", "fstatfs", "statfs", "umask", "fchmod", "chmod", "utimensat", "symlink", "link",
      "pipe", "pipe2", "eventfd2", "ioctl", "flock", "copy_file_range", "sendfile",
      // processes and threads
      "clone", "clone3", "fork", "vfork", "execve", "execveat", "wait4", "waitid", "exit", "exit_group", "set_tid_address",
      "set_robust_list", "get_robust_list", "rseq", "futex", "sched_yield", "sched_getaffinity",
      "arch_prctl", "prctl", "prlimit64", "getrlimit", "getpid", "getppid", "gettid", "getuid", "geteuid",
      "getgid", "getegid", "getgroups", "getpgrp", "getpgid", "setpgid", "getsid", "setsid", "kill", "tgkill",
      "capget", "uname", "sysinfo", "getrusage", "getpriority", "personality",
      // signals
      "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "rt_sigsuspend", "rt_sigtimedwait",
      // time
      "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
      "timerfd_create", "timerfd_settime", "timerfd_gettime",
      // polling
      "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
      "epoll_pwait", "epoll_pwait2",
      // randomness
      "getrandom",
      // sockets (the sandbox's network is empty or the egress proxy)
      "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "getsockname", "getpeername",
      "setsockopt", "getsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
  };
  // clang-format on
  return list;
}

SeccompProgram SeccompProgram::strict_policy() { return allow_list(strict_syscalls()); }

SeccompProgram SeccompProgram::for_choice(const SeccompChoice& choice) {
  switch (choice.kind) {
    case SeccompChoice::kStrict:
      return strict_policy();
    case SeccompChoice::kAllowList:
      return allow_list(choice.allow);
    case SeccompChoice::kForkServer:
      return fork_server_policy();
    case SeccompChoice::kDefault:
      break;
  }
  return default_policy();
}

int load_seccomp_program(const sock_fprog* prog, int* listener) noexcept {
  long fd = -1;
  if (listener) {
    *listener = -1;
    fd = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog);
    if (fd >= 0) {
      *listener = static_cast<int>(fd);
      return 0;
    }
    // EINVAL: a kernel without user notification; EBUSY: an outer filter
    // (e.g. a container manager's) already has a listener. Load it plain:
    // denied calls then fail with ENOSYS instead of EPERM, still denied.
    if (errno != EINVAL && errno != EBUSY) return errno;
  }
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) != 0) return errno;
  return 0;
}

std::string inherited_seccomp_warning() {
  if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2) return "";
  std::string count;  // "Seccomp_filters:\tN" (Linux 5.9 and later)
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Seccomp_filters:", 0) == 0) count = line.substr(line.find_first_not_of(" \t", 16));
  return "nsbox runs under " + (count.empty() ? std::string("a") : count) +
         " seccomp filter(s) it did not install (a service manager's SystemCallFilter=, RestrictSUIDSGID=, "
         "ProtectHostname=..., or a container runtime's profile): every sandbox inherits them and they answer "
         "before nsbox's own, so the calls they refuse fail with their errno and are not in the runs' "
         "denied_syscalls";
}

}  // namespace nsbox
