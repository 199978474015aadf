// What a workload sees of the host: nothing it was not given.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <seccomp.h>

#include <set>
#include <sstream>
#include <thread>

#include "fixture.h"
#include "node_process.h"
#include "nsbox/unique_fd.h"

namespace nsbox::testing {
namespace {

TEST(Isolation, RunsAsSandboxUserMappedToUnprivilegedHostId) {
  std::string out = python(
      "import os\n"
      "print(os.getuid(), os.geteuid(), os.getgid(), os.getegid())\n"
      "print(open('/proc/self/uid_map').read().split())\n");
  EXPECT_NE(out.find("65534 65534 65534 65534"), std::string::npos) << out;
  // uid_map inside: [inside, host, count]; the host id must not be root.
  auto pos = out.find("['65534', '");
  ASSERT_NE(pos, std::string::npos) << out;
  std::string host_id = out.substr(pos + 11, out.find('\'', pos + 11) - pos - 11);
  EXPECT_NE(host_id, "0");
  EXPECT_EQ(host_id, std::to_string(launcher().host_ids().uid));
}

TEST(Isolation, ProcShowsOnlyTheSandboxsProcesses) {
  std::string out = python(
      "import os\n"
      "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
      "print(os.getpid())\n");
  EXPECT_EQ(out, "[1, 2]\n2\n");
}

// The secret is planted, world-readable, where the sandbox mounts nothing of
// its own (/var/tmp, the test's cwd) as well as where it does (/tmp,
// /dev/shm): a stray bind of a host directory would show it.
TEST(Isolation, HostFileOutsideRootfsCannotBeReadByAnyPath) {
  const std::string name = unique_token("nsboxtest-secret-");
  const std::vector<std::string> paths = {"/tmp/" + name, "/var/tmp/" + name, "/dev/shm/" + name,
                                          std::filesystem::current_path().string() + "/" + name};
  std::string listed;
  for (const auto& path : paths) {
    std::ofstream(path) << "TOPSECRET";
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0) << path;
    listed += "'" + path + "', ";
  }
  std::string out = python(
      "import os\n"
      "found = []\n"
      "for path in [" +
      listed +
      "]:\n"
      "    for p in [path, '/proc/1/root' + path, '/proc/self/root' + path, '/proc/1/cwd/' + path,\n"
      "              '/proc/self/cwd/../..' + path]:\n"
      "        try:\n"
      "            found.append(open(p).read())\n"
      "        except OSError:\n"
      "            pass\n"
      "for root, dirs, files in os.walk('/'):\n"
      "    if root.startswith('/proc'):\n"
      "        dirs[:] = []\n"
      "    if '" +
      name +
      "' in files:\n"
      "        found.append(root)\n"
      "print('found' if found else 'none', found)\n");
  for (const auto& path : paths) ::unlink(path.c_str());
  EXPECT_EQ(out, "none []\n");
}

TEST(Isolation, RootAndUsrAreReadOnlyTmpIsWritable) {
  std::string out = python(
      "import errno, os\n"
      "for p in ['/x', '/usr/x', '/usr/bin/x', '/etc/x']:\n"
      "    try:\n"
      "        open(p, 'a').close(); print(p, 'WRITABLE')\n"
      "    except OSError as e:\n"
      "        print(p, errno.errorcode[e.errno])\n"
      "for p in ['/', '/usr', '/etc', '/usr/local/bin']:\n"
      "    print(p, 'ro' if os.statvfs(p).f_flag & os.ST_RDONLY else 'rw')\n"
      "open('/tmp/ok', 'w').write('x'); print('tmp', open('/tmp/ok').read())\n");
  EXPECT_EQ(out,
            "/x EROFS\n/usr/x EROFS\n/usr/bin/x EROFS\n/etc/x EROFS\n"
            "/ ro\n/usr ro\n/etc ro\n/usr/local/bin ro\ntmp x\n");
}

TEST(Isolation, TmpSizeCapHolds) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import errno\n"
                               "f = open('/tmp/big', 'wb')\n"
                               "try:\n"
                               "    for i in range(16): f.write(b'x' * (1 << 20)); f.flush()\n"
                               "    print('wrote 16MiB')\n"
                               "except OSError as e:\n"
                               "    print(errno.errorcode[e.errno], i)\n"});
  spec.limits.tmpfs_bytes = 8 << 20;
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data;
  EXPECT_EQ(r.stdout_data.substr(0, 6), "ENOSPC") << r.stdout_data;
}

TEST(Isolation, OnlyLoopbackExistsAndIsUp) {
  std::string out = python(
      "import socket\n"
      "names = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
      "print(names)\n"
      "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); port = s.getsockname()[1]\n"
      "c = socket.create_connection(('127.0.0.1', port)); print('lo up')\n"
      "print('routes', len(open('/proc/net/route').readlines()) - 1)\n");
  EXPECT_EQ(out, "['lo']\nlo up\nroutes 0\n");
}

// What nsbox was started with does not reach the run: a service unit's
// LimitRTPRIO= would let a run take a CPU with real-time scheduling.
TEST(Isolation, SchedulingAndLockingRlimitsAreSetNotInherited) {
  const int resources[] = {RLIMIT_RTPRIO, RLIMIT_NICE, RLIMIT_MEMLOCK};
  rlimit saved[3];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(::getrlimit(resources[i], &saved[i]), 0);
  // As high as this process may set them (without CAP_SYS_RESOURCE, its
  // hard limits: memlock's is 8 MiB by default).
  const rlimit high[] = {{50, 50}, {30, 30}, {RLIM_INFINITY, RLIM_INFINITY}};
  for (int i = 0; i < 3; ++i)
    if (::setrlimit(resources[i], &high[i]) != 0) {
      const rlimit hard{saved[i].rlim_max, saved[i].rlim_max};
      ASSERT_EQ(::setrlimit(resources[i], &hard), 0);
    }
  rlimit memlock{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &memlock), 0);
  ASSERT_GT(memlock.rlim_cur, 65536u) << "the run's 64 KiB would be the inherited value";
  Result r = run_with(capture_spec({"python3", "-c",
                                    "import resource as r\nprint(*(r.getrlimit(x) for x in (r.RLIMIT_RTPRIO, "
                                    "r.RLIMIT_NICE, r.RLIMIT_MEMLOCK)))\n"}));
  for (int i = 0; i < 3; ++i) ::setrlimit(resources[i], &saved[i]);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "(0, 0) (0, 0) (65536, 65536)\n");
}

// What a run's core limit reads when nsbox is started with `ulimit -c`'s
// hard limit at 0, as root and as an ordinary user (as whom, with a uid
// argument). A hardened host's `* hard core 0` made every run fail to
// start once the limit was 1 (review of 2026-12-06).
std::string core_limit_of_a_run_under_hard_zero(std::optional<uid_t> as) {
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(::open("/dev/null", O_WRONLY), 2);  // an ordinary user's best-effort warnings
    if (as && (::setgroups(0, nullptr) != 0 || ::setresgid(*as, *as, *as) != 0 || ::setresuid(*as, *as, *as) != 0))
      ::_exit(99);
    const rlimit zero{0, 0};
    if (::setrlimit(RLIMIT_CORE, &zero) != 0) ::_exit(97);
    const std::string root = test_rootfs();
    ::execl(NSBOX_BINARY, "nsbox", "run", "--best-effort", "--rootfs", root.c_str(), "--", "python3", "-c",
            "import resource as r; print(r.getrlimit(r.RLIMIT_CORE))", static_cast<char*>(nullptr));
    ::_exit(98);
  }
  ::close(out[1]);
  std::string seen;
  char buf[512];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) seen.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  EXPECT_EQ(wait_cli(pid), 0) << seen;
  return seen;
}

// Whether this process has CAP_SYS_RESOURCE, which raising a hard limit
// takes (this project's CI hosts run root without it).
bool has_cap_sys_resource() {
  std::istringstream status(slurp("/proc/self/status"));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("CapEff:")) return (std::stoull(line.substr(7), nullptr, 16) >> CAP_SYS_RESOURCE) & 1;
  return false;
}

// A run's core limit is 1 byte: no core file, and a dump to a core_pattern
// pipe aborted, where 0 would hand the run's memory to the host's helper
// (run as root). Under a hard limit of 0, an nsbox that may raises its own
// to give it (root with CAP_SYS_RESOURCE); others give 0, and the run
// still starts.
TEST(Isolation, ARunsCoreLimitIsOneByteAndARunStartsUnderAHardLimitOfZero) {
  Result r = run_with(capture_spec({"python3", "-c", "import resource as r; print(r.getrlimit(r.RLIMIT_CORE))"}));
  ASSERT_EQ(r.status, RunStatus::kOk) << r.error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "(1, 1)\n");
  if (::geteuid() != 0) GTEST_SKIP() << "not root: the hard limit of 0 is tried as root";
  EXPECT_EQ(core_limit_of_a_run_under_hard_zero(std::nullopt), has_cap_sys_resource() ? "(1, 1)\n" : "(0, 0)\n");
  EXPECT_EQ(core_limit_of_a_run_under_hard_zero(65534), "(0, 0)\n");
}

// nsbox started under a hard limit below a run's (ulimit, a unit's
// LimitNOFILE=) cannot give the run its profile's value: refused before
// the sandbox exists, naming the limit, both values and what would do
// (it was "setrlimit RLIMIT_FSIZE: Operation not permitted" from inside).
TEST(Isolation, AHardRlimitBelowTheRunsIsRefusedByName) {
  struct Case {
    const char* ulimit;
    const char* names;
  };
  for (const Case& c : {Case{"-f 32768",
                             "RLIMIT_FSIZE 67108864 (the profile's limits.file_size) is above nsbox's "
                             "own hard limit 33554432"},
                        Case{"-n 128",
                             "RLIMIT_NOFILE 256 (the profile's limits.open_files) is above nsbox's own "
                             "hard limit 128"}}) {
    const std::string command =
        std::string("ulimit ") + c.ulimit + " && exec \"$0\" run --rootfs " + test_rootfs() + " -- true 2>&1";
    const std::string sh = "bash -c '" + command + "' " + NSBOX_BINARY;  // bash: ulimit -f in KiB
    FILE* p = ::popen(sh.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = ::pclose(p);
    EXPECT_EQ(WEXITSTATUS(status), 125) << out;
    EXPECT_NE(out.find(c.names), std::string::npos) << out;
    EXPECT_NE(out.find("or lower the run's"), std::string::npos) << out;
  }
}

// The output (stdout and stderr) and exit code of NSBOX_BINARY args, run
// under a seccomp filter that answers errno to syscall, as a service
// manager's filter (systemd's RestrictSUIDSGID= answers ENOSYS to openat2)
// or a container runtime's would be: inherited, and in force before nsbox's.
std::pair<int, std::string> nsbox_under_filter(int syscall_nr, int errno_answer, const std::vector<std::string>& args) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  EXPECT_NE(ctx, nullptr);
  EXPECT_EQ(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0), 0);  // root: no no_new_privs needed
  EXPECT_EQ(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(static_cast<uint32_t>(errno_answer)), syscall_nr, 0), 0);
  auto outcome = run_cli_merged(args, [ctx] {
    if (seccomp_load(ctx) != 0) ::_exit(99);
  });
  seccomp_release(ctx);
  return outcome;
}

// Under a parent's filter that refuses openat2 (systemd's RestrictSUIDSGID=
// did, in the shipped unit), every run failed as "open rootfs ...: Function
// not implemented". nsbox says what and why once, before any sandbox, and
// `nsbox doctor` shows it with the filter as FAIL and warn lines.
TEST(Isolation, AParentsSeccompFilterIsNamedAndOneRefusingOpenat2StopsNsboxBeforeAnyRun) {
  auto [code, out] = nsbox_under_filter(SCMP_SYS(openat2), ENOSYS, {"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("openat2(): Function not implemented: the kernel is older than 5.6, or nsbox runs under a "
                     "seccomp filter that refuses it"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("open rootfs"), std::string::npos) << out;
  // A node does not start (exit 3, which the unit's RestartPreventExitStatus
  // names: restarting cannot help) rather than restart over and over.
  const std::string listen = "127.0.0.1:" + std::to_string(free_port());
  std::tie(code, out) = nsbox_under_filter(SCMP_SYS(openat2), ENOSYS, {"serve", "--listen", listen});
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("nsbox serve: the spawner could not start: openat2(): Function not implemented"),
            std::string::npos)
      << out;
  std::tie(code, out) = nsbox_under_filter(SCMP_SYS(openat2), ENOSYS, {"doctor"});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("  FAIL  openat2: openat2(): Function not implemented"), std::string::npos) << out;
  EXPECT_NE(out.find("  warn  filters nsbox runs under: nsbox runs under 1 seccomp filter(s) it did not install"),
            std::string::npos)
      << out;
  // A filter that leaves nsbox what it needs: runs go ahead, the doctor
  // warns, and without one it says none.
  std::tie(code, out) = nsbox_under_filter(SCMP_SYS(acct), EPERM, {"run", "--rootfs", test_rootfs(), "--", "true"});
  EXPECT_EQ(code, 0) << out;
  if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 0) {  // this test itself under no filter (a CI in a container is)
    EXPECT_NE(run_cli({"doctor"}).out.find("  ok    filters nsbox runs under: none"), std::string::npos);
  }
}

TEST(Isolation, NoCapabilitiesNoNewPrivsSeccompFilter) {
  std::string out = python(
      "for l in open('/proc/self/status'):\n"
      "    k = l.split(':')[0]\n"
      "    if k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):\n"
      "        print(k, l.split()[1])\n");
  EXPECT_EQ(out,
            "CapInh 0000000000000000\nCapPrm 0000000000000000\nCapEff 0000000000000000\n"
            "CapBnd 0000000000000000\nCapAmb 0000000000000000\nNoNewPrivs 1\nSeccomp 2\n");
}

// Each denied syscall through ctypes, as an attacker's Python would call it.
TEST(Isolation, DangerousSyscallsAreDenied) {
  std::string out = python(
      "import ctypes, errno\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def call(name, nr, *args):\n"
      "    ctypes.set_errno(0)\n"
      "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n"
      "    print(name, errno.errorcode.get(ctypes.get_errno(), 'OK') if r == -1 else 'OK')\n"
      "call('ptrace', 101, 0, 0, 0, 0)\n"  // PTRACE_TRACEME
      "call('mount', 165, 0, 0, 0, 0, 0)\n"
      "call('umount2', 166, 0, 0)\n"
      "call('unshare_user', 272, 0x10000000)\n"  // CLONE_NEWUSER
      "call('setns', 308, 0, 0)\n"
      "call('keyctl', 250, 0, -3, 0)\n"
      "call('bpf', 321, 0, 0, 0)\n"
      "call('perf_event_open', 298, 0, 0, -1, -1, 0)\n"
      "call('userfaultfd', 323, 0)\n"
      "call('clone_newns', 56, 0x00020000 | 17, 0, 0, 0, 0)\n"  // clone(CLONE_NEWNS|SIGCHLD)
      "call('clone3', 435, 0, 0)\n"
      "call('io_uring_setup', 425, 1, 0)\n"
      "call('personality', 135, 0x0040000)\n"  // ADDR_NO_RANDOMIZE
      "call('pivot_root', 155, 0, 0)\n"
      "call('chroot', 161, 0)\n"
      "call('open_by_handle_at', 304, 0, 0, 0)\n"
      "call('syslog', 103, 3, 0, 0)\n");
  EXPECT_EQ(out,
            "ptrace EPERM\nmount EPERM\numount2 EPERM\nunshare_user EPERM\nsetns EPERM\n"
            "keyctl EPERM\nbpf EPERM\nperf_event_open EPERM\nuserfaultfd EPERM\n"
            "clone_newns EPERM\nclone3 ENOSYS\nio_uring_setup ENOSYS\npersonality EPERM\n"
            "pivot_root EPERM\nchroot EPERM\nopen_by_handle_at EPERM\nsyslog EPERM\n");
}

// `nsbox run` with its stdio on files, as `nsbox run ... >> runs.log 2>&1
// < in.txt` leaves it: starts nsbox with fds 0, 1 and 2 as given (-1: the
// test's own); its pid.
pid_t spawn_cli_on_fds(const std::vector<std::string>& args, int in, int out, int err) {
  std::vector<char*> argv;
  std::string binary = NSBOX_BINARY;
  argv.push_back(binary.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (auto [from, to] : {std::pair{in, 0}, std::pair{out, 1}, std::pair{err, 2}})
      if (from >= 0) ::dup2(from, to);
    ::execv(binary.c_str(), argv.data());
    ::_exit(126);
  }
  return pid;
}

// spawn_cli_on_fds, then its exit code.
int run_cli_on_fds(const std::vector<std::string>& args, int in, int out, int err) {
  return wait_cli(spawn_cli_on_fds(args, in, out, err));
}

// A file nsbox's stdio names reaches the run as a stream only: not its
// host path, not what it held before (the sandbox user may read it through
// /proc/self/fd), not ftruncate.
TEST(Isolation, TheCallersStdioFilesReachARunAsStreamsOnly) {
  TempDir dir;
  const std::string log = dir.write("runs.log", "EARLIER-RUN secret=hunter2\n");
  ASSERT_EQ(::chmod(log.c_str(), 0644), 0);
  const std::string input = dir.write("in.txt", "line from the caller\n");
  UniqueFd out(::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  UniqueFd in(::open(input.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(out && in);
  const int code = run_cli_on_fds({"run", "--", "python3", "-c", R"(import os, sys
print('links', os.readlink('/proc/self/fd/0'), os.readlink('/proc/self/fd/1'), os.readlink('/proc/self/fd/2'))
try:
    print('reopened', open('/proc/self/fd/1').read().replace('\n', '|'))
except OSError as e:
    print('reopen refused', e.errno)
sys.stdout.flush()
try:
    os.ftruncate(1, 0)
    print('truncated')
except OSError as e:
    print('truncate refused', e.errno)
print('input', sys.stdin.read().strip())
sys.stderr.write('to stderr\n'))"},
                                  in.get(), out.get(), out.get());
  EXPECT_EQ(code, 0);
  const std::string text = slurp(log);
  EXPECT_EQ(text.rfind("EARLIER-RUN secret=hunter2\n", 0), 0u) << text;
  EXPECT_EQ(text.find("secret", 20), std::string::npos) << "the run read the file's earlier contents:\n" << text;
  EXPECT_EQ(text.find("truncated"), std::string::npos) << text;
  EXPECT_EQ(text.find(dir.path()), std::string::npos) << "the run saw the host path:\n" << text;
  EXPECT_NE(text.find("links pipe:"), std::string::npos) << text;
  EXPECT_NE(text.find("input line from the caller\n"), std::string::npos) << text;
  EXPECT_NE(text.find("to stderr\n"), std::string::npos) << text;
}

// The caller's stdin file is shared with its shell: the run moves its offset
// by what it read, no more (`while read x; do nsbox run ...; done < list`).
// A terminal as stdin reaches the run through a pipe too (a run, in a
// session of its own, would read it unstopped from the background), and two
// descriptions of one output file keep the order the run wrote in.
TEST(Isolation, StdinFilesMoveByWhatTheRunReadAndATerminalIsRelayed) {
  TempDir dir;
  const std::string list = dir.write("list.txt", "1\n2\n3\n");
  UniqueFd in(::open(list.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(in);
  EXPECT_EQ(run_cli_on_fds({"run", "--", "true"}, in.get(), -1, -1), 0);
  EXPECT_EQ(::lseek(in.get(), 0, SEEK_CUR), 0) << "a run that read nothing moved the caller's offset";
  EXPECT_EQ(run_cli_on_fds({"run", "--", "sh", "-c", "read a"}, in.get(), -1, -1), 0);
  EXPECT_EQ(::lseek(in.get(), 0, SEEK_CUR), 2) << "sh's read takes one line, a byte at a time";

  const std::string log = dir.path() + "/log";
  UniqueFd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  UniqueFd err(::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  EXPECT_EQ(run_cli_on_fds({"run", "--", "sh", "-c", "for i in 1 2 3; do echo out-$i; echo err-$i >&2; done"}, -1,
                           out.get(), err.get()),
            0);
  EXPECT_EQ(slurp(log), "out-1\nerr-1\nout-2\nerr-2\nout-3\nerr-3\n");

  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  UniqueFd master_fd(master), slave_fd(slave);
  ASSERT_EQ(::write(master, "typed\n", 6), 6);
  const std::string seen = dir.path() + "/seen";
  UniqueFd seen_fd(::open(seen.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_EQ(run_cli_on_fds({"run", "--", "sh", "-c", "readlink /proc/self/fd/0; read x; echo got $x"}, slave,
                           seen_fd.get(), -1),
            0);
  const std::string text = slurp(seen);
  EXPECT_EQ(text.rfind("pipe:", 0), 0u) << text;
  EXPECT_NE(text.find("got typed\n"), std::string::npos) << text;

  // A terminal as stdout stays a terminal, open for writing only: the run
  // cannot read the operator's keys through it (the caller's fd is the
  // slave's read-write description).
  ASSERT_EQ(::write(master, "k\n", 2), 2);
  const std::string probe = dir.path() + "/probe";
  UniqueFd probe_fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_EQ(
      run_cli_on_fds({"run", "--", "python3", "-c",
                      "import os, sys\nr = [str(os.isatty(1))]\ntry:\n    os.read(1, 1)\n    r.append('read')\n"
                      "except OSError as e:\n    r.append(str(e.errno))\nsys.stderr.write(' '.join(r) + '\\n')\n"},
                     -1, slave, probe_fd.get()),
      0);
  EXPECT_EQ(slurp(probe), "True 9\n") << "isatty(1), then read(1)'s errno: EBADF";
}

// A run that spoils the terminal it writes to: raw mode, exclusive mode,
// output stopped, another line discipline (N_NULL). It reports the echo
// flag, exclusive mode and TIOCSETD's errno on stderr.
const char* kTerminalSpoiler = R"(import ctypes, fcntl, sys, termios, tty
tty.setraw(1)
fcntl.ioctl(1, termios.TIOCEXCL)
termios.tcflow(1, termios.TCOOFF)
try:
    fcntl.ioctl(1, termios.TIOCSETD, ctypes.c_int(27))
    setd = 0
except OSError as e:
    setd = e.errno
a = termios.tcgetattr(1)
sys.stderr.write('echo %d excl %d setd %d\n' % (a[3] & termios.ECHO, fcntl.ioctl(1, 0x80045440, b'0000')[0], setd)))";

// Runs the spoiler with stdout on the pty slave; in the background: nsbox
// in a process group of its own, while the group of a session whose
// controlling terminal is the slave is in the foreground.
int spoil_terminal(int slave, int err, bool background) {
  if (!background) return run_cli_on_fds({"run", "--", "python3", "-c", kTerminalSpoiler}, -1, slave, err);
  const pid_t session = ::fork();
  if (session == 0) {
    if (::setsid() < 0 || ::ioctl(slave, TIOCSCTTY, 0) != 0) ::_exit(97);
    const pid_t job = ::fork();
    if (job == 0) {
      ::setpgid(0, 0);
      ::dup2(slave, 1);
      ::dup2(err, 2);
      ::execl(NSBOX_BINARY, "nsbox", "run", "--", "python3", "-c", kTerminalSpoiler, static_cast<char*>(nullptr));
      ::_exit(98);
    }
    int status = 0;
    ::waitpid(job, &status, 0);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 99);
  }
  return wait_cli(session);
}

// What a run changes on the caller's terminal through its stdout does not
// outlast the run: its modes when nsbox is in the foreground; what leaves
// the terminal unusable (exclusive mode, stopped output, the line
// discipline, which seccomp refuses first) in any case.
TEST(Isolation, ARunsChangesToTheCallersTerminalAreUndoneAfterIt) {
  for (const bool background : {false, true}) {
    SCOPED_TRACE(background ? "nsbox in the background" : "nsbox in the foreground");
    TempDir dir;
    int master = -1, slave = -1;
    ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
    UniqueFd master_fd(master), slave_fd(slave);
    termios before{};
    ASSERT_EQ(::tcgetattr(slave, &before), 0);
    ASSERT_TRUE(before.c_lflag & ECHO);
    const std::string probe = dir.path() + "/probe";
    UniqueFd probe_fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    EXPECT_EQ(spoil_terminal(slave, probe_fd.get(), background), 0);
    EXPECT_EQ(slurp(probe), "echo 0 excl 1 setd 1\n") << "the run changed the terminal; TIOCSETD: EPERM";
    int discipline = -1;
    ASSERT_EQ(::ioctl(slave, TIOCGETD, &discipline), 0);
    EXPECT_EQ(discipline, N_TTY);
    termios after{};
    ASSERT_EQ(::tcgetattr(slave, &after), 0);
    if (!background) {
      EXPECT_EQ(after.c_lflag, before.c_lflag) << "echo, canonical mode";
      EXPECT_EQ(after.c_iflag, before.c_iflag);
      EXPECT_EQ(after.c_oflag, before.c_oflag);
    }
    int exclusive = -1;
    ASSERT_EQ(::ioctl(slave, TIOCGEXCL, &exclusive), 0);
    EXPECT_EQ(exclusive, 0) << "the operator's later opens of the terminal would fail";
    ASSERT_EQ(::fcntl(slave, F_SETFL, O_NONBLOCK), 0);  // a stopped terminal's write would wait for good
    EXPECT_EQ(::write(slave, "after\n", 6), 6) << "the terminal's output stayed stopped";
    pollfd p{master, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 5000), 1) << "the terminal's output stayed stopped";
  }
}

TEST(Isolation, AStdioDirectoryIsRefusedAndOutputPastTheFileSizeLimitDropped) {
  TempDir dir;
  UniqueFd directory(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const std::string err_path = dir.path() + "/err";
  UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(directory && err);
  // fchdir(0) would walk the host's tree from there.
  EXPECT_EQ(run_cli_on_fds({"run", "--", "true"}, directory.get(), -1, err.get()), 2);
  EXPECT_NE(slurp(err_path).find("standard input is a directory"), std::string::npos) << slurp(err_path);

  // The run's RLIMIT_FSIZE no longer meets the file; nsbox keeps it.
  const std::string profile = dir.write("small.yaml", "name: small\nextends: default\nlimits:\n  file_size: 1MiB\n");
  const std::string out_path = dir.path() + "/out";
  UniqueFd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  UniqueFd err2(::open(err_path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  EXPECT_EQ(run_cli_on_fds({"run", "--profile", profile, "--", "python3", "-c",
                            "import sys\nfor _ in range(3): sys.stdout.write('x' * (1 << 20))"},
                           -1, out.get(), err2.get()),
            0);
  struct stat st {};
  ASSERT_EQ(::stat(out_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_NE(slurp(err_path).find("standard output: the run's output past 1MiB (its file size limit) was dropped"),
            std::string::npos)
      << slurp(err_path);
}

// What a run sets on a pipe it was given as stdio (O_NONBLOCK: Node sets it
// and, killed at a limit, never puts it back) is its own description's: the
// caller's ends stay as they were, and its next reader or writer (head, a
// `while read` loop) does not fail with EAGAIN. The pipe is still the
// caller's: what the run does not read stays in it.
TEST(Isolation, WhatARunSetsOnTheCallersPipesStaysWithTheRun) {
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  UniqueFd in_read(in[0]), in_write(in[1]), out_read(out[0]), out_write(out[1]);
  ASSERT_EQ(::write(in_write.get(), "1\n2\n", 4), 4);
  EXPECT_EQ(run_cli_on_fds({"run", "--", "python3", "-c",
                            "import os\nos.set_blocking(0, False)\nos.set_blocking(1, False)\n"
                            "line = b''\nwhile not line.endswith(b'\\n'): line += os.read(0, 1)\n"
                            "os.write(1, b'got ' + line + os.readlink('/proc/self/fd/1').encode() + b'\\n')"},
                           in_read.get(), out_write.get(), -1),
            0);
  EXPECT_FALSE(::fcntl(in_read.get(), F_GETFL) & O_NONBLOCK) << "the caller's stdin turned non-blocking";
  EXPECT_FALSE(::fcntl(out_write.get(), F_GETFL) & O_NONBLOCK) << "the caller's stdout turned non-blocking";
  out_write.reset();
  std::string seen;
  char buf[256];
  for (ssize_t n; (n = ::read(out_read.get(), buf, sizeof buf)) > 0;) seen.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(seen.rfind("got 1\npipe:", 0), 0u) << seen;
  char rest[8] = {};
  EXPECT_EQ(::read(in_read.get(), rest, sizeof rest), 2);
  EXPECT_STREQ(rest, "2\n") << "the run took more than it read";
}

// A socket as stdio reaches a run as a pipe that nsbox copies: given the
// caller's TCP connection, a run could disconnect it (connect with
// AF_UNSPEC) and connect it anywhere from the caller's network namespace,
// whatever its profile says, or shut it down under the caller.
TEST(Isolation, ACallersSocketReachesARunAsAStreamOnly) {
  auto listener = [](uint16_t& port) {
    UniqueFd l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(l.get(), 4) != 0 ||
        ::getsockname(l.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return UniqueFd();
    port = ntohs(a.sin_port);
    return l;
  };
  uint16_t port = 0, elsewhere_port = 0;
  UniqueFd server = listener(port), elsewhere = listener(elsewhere_port);
  ASSERT_TRUE(server && elsewhere);
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  UniqueFd conn(::accept4(server.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(conn);
  ASSERT_EQ(::send(client.get(), "ping\n", 5, MSG_NOSIGNAL), 5);
  const std::string code = R"(import ctypes, os, socket, struct, sys
line = sys.stdin.readline().strip()
print('got', line, os.readlink('/proc/self/fd/0')[:5], os.readlink('/proc/self/fd/1')[:5], flush=True)
libc = ctypes.CDLL(None, use_errno=True)
unspec = struct.pack('H14x', 0)
target = struct.pack('=H', socket.AF_INET) + struct.pack('!H4s8x', )" +
                           std::to_string(elsewhere_port) + R"(, socket.inet_aton('127.0.0.1'))
for fd in (0, 1):
    libc.connect(fd, unspec, len(unspec))
    libc.connect(fd, target, len(target))
    libc.shutdown(fd, socket.SHUT_RDWR)
sys.stderr.write('done\n'))";
  TempDir dir;
  const std::string err_path = dir.path() + "/err";
  UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_EQ(run_cli_on_fds({"run", "--", "python3", "-c", code}, conn.get(), conn.get(), err.get()), 0);
  EXPECT_EQ(slurp(err_path), "done\n");
  pollfd p{elsewhere.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the run connected from the caller's network namespace";
  // Still the caller's, still connected, in both directions.
  ASSERT_EQ(::send(conn.get(), "after\n", 6, MSG_NOSIGNAL), 6) << std::strerror(errno);
  ASSERT_EQ(::shutdown(conn.get(), SHUT_WR), 0);
  std::string seen;
  char buf[256];
  for (ssize_t n; (n = ::recv(client.get(), buf, sizeof buf, 0)) > 0;) seen.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(seen, "got ping pipe: pipe:\nafter\n");
}

// The file-size cap is a file's (the run's RLIMIT_FSIZE no longer meets
// it): a socket's stream, journald's for one, takes all the run writes.
TEST(Isolation, OutputRelayedToASocketHasNoFileSizeCap) {
  TempDir dir;
  const std::string profile = dir.write("small.yaml", "name: small\nextends: default\nlimits:\n  file_size: 1MiB\n");
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  size_t received = 0;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = ::recv(ours.get(), buf, sizeof buf, 0)) > 0;) received += static_cast<size_t>(n);
  });
  const int code = run_cli_on_fds({"run", "--profile", profile, "--", "python3", "-c",
                                   "import sys\nfor _ in range(3): sys.stdout.write('x' * (1 << 20))"},
                                  -1, theirs.get(), -1);
  ::shutdown(theirs.get(), SHUT_WR);
  reader.join();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(received, 3u << 20);
}

// run_cli_on_fds, but nsbox is killed if it has not ended within `seconds`
// (then -1): a relay that waits for a reader for good must fail the test,
// not hang it.
int run_cli_on_fds_within(const std::vector<std::string>& args, int in, int out, int err, int seconds) {
  const pid_t pid = spawn_cli_on_fds(args, in, out, err);
  for (int i = 0; i < seconds * 50; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  wait_cli(pid);
  return -1;
}

// A socket's peer that goes away ends the run's writes as it would have
// had the run held the socket (EPIPE, SIGPIPE), rather than leaving it to
// write into a relay that drops everything until its time limit.
TEST(Isolation, ARunIsToldWhenTheReaderOfItsRelayedSocketIsGone) {
  TempDir dir;
  const std::string err_path = dir.path() + "/err";
  UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd peer(pair[0]), theirs(pair[1]);
  std::thread reader([&] {
    char buf[10];
    (void)::recv(peer.get(), buf, sizeof buf, MSG_WAITALL);
    peer.reset();
  });
  const int code = run_cli_on_fds_within({"run", "--timeout", "25", "--", "sh", "-c", "yes; echo \"yes ended $?\" >&2"},
                                         -1, theirs.get(), err.get(), 50);
  theirs.reset();  // the reader ends, whatever happened
  reader.join();
  EXPECT_EQ(code, 0) << slurp(err_path);
  EXPECT_NE(slurp(err_path).find("yes ended 141\n"), std::string::npos) << "yes was not told: " << slurp(err_path);
  EXPECT_NE(slurp(err_path).find("writing the run's standard output: Broken pipe; the run was told so"),
            std::string::npos)
      << slurp(err_path);
}

// A reader that takes nothing more holds nsbox no longer than the run's
// time limit: had the run held the socket, it would have been killed there.
TEST(Isolation, AStalledReaderOfARelayedSocketHoldsNsboxOnlyToTheTimeLimit) {
  TempDir dir;
  const std::string err_path = dir.path() + "/err";
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd stalled(pair[0]), theirs(pair[1]);
  // Killed at its limit while writing; and ended by itself with its last
  // output (less than a pipe holds) still in the relay.
  for (const auto& [command, want] :
       {std::pair{"head -c 50000000 /dev/zero", 137}, std::pair{"head -c 50000 /dev/zero", 0}}) {
    UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_EQ(
        run_cli_on_fds_within({"run", "--timeout", "3", "--", "sh", "-c", command}, -1, theirs.get(), err.get(), 40),
        want)
        << command << ": " << slurp(err_path);
    EXPECT_NE(slurp(err_path).find("its reader took no more by the run's time limit"), std::string::npos)
        << command << ": " << slurp(err_path);
  }
}

// A packet-mode pipe (O_DIRECT) stays one: each write is one read.
TEST(Isolation, APacketPipeReachesARunAsOne) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC | O_DIRECT), 0);
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  EXPECT_EQ(run_cli_on_fds({"run", "--", "python3", "-c", "import os\nos.write(1, b'A')\nos.write(1, b'BB')"}, -1,
                           write_end.get(), -1),
            0);
  write_end.reset();
  char buf[16];
  EXPECT_EQ(::read(read_end.get(), buf, sizeof buf), 1);
  EXPECT_EQ(::read(read_end.get(), buf, sizeof buf), 2);
}

// Run by an ordinary user, nsbox cannot open root's pipe anew: it hands it
// over and puts its flags back after the run.
TEST(Isolation, AnUnprivilegedRunsFlagsOnAPipeItCannotReopenArePutBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "switches to another user";
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(write_end.get(), 1);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      ::_exit(99);
    const std::string root = test_rootfs();
    ::execl(NSBOX_BINARY, "nsbox", "run", "--best-effort", "--rootfs", root.c_str(), "--", "python3", "-c",
            "import os\nos.set_blocking(1, False)\nos.write(1, os.readlink('/proc/self/fd/1').encode())",
            static_cast<char*>(nullptr));
    ::_exit(98);
  }
  EXPECT_EQ(wait_cli(pid), 0);
  EXPECT_FALSE(::fcntl(write_end.get(), F_GETFL) & O_NONBLOCK) << "the caller's pipe stayed non-blocking";
  write_end.reset();
  char buf[64] = {};
  EXPECT_GT(::read(read_end.get(), buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf).rfind("pipe:", 0), 0u) << buf;
}

TEST(Isolation, SocketsThatCannotBeRelayedAsStreamsAreRefused) {
  TempDir dir;
  const std::string err_path = dir.path() + "/err";
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd datagram(pair[0]), peer(pair[1]);
  UniqueFd listening(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listening.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listening.get(), 1), 0);
  UniqueFd unconnected(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const struct {
    int in, out;
    const char* said;
  } cases[] = {{-1, datagram.get(), "standard output is a datagram socket: "},
               {listening.get(), -1, "standard input is a listening socket: "},
               {unconnected.get(), -1, "standard input is a socket that is not connected: "}};
  for (const auto& c : cases) {
    UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_EQ(run_cli_on_fds({"run", "--", "true"}, c.in, c.out, err.get()), 2) << c.said;
    EXPECT_NE(slurp(err_path).find(c.said), std::string::npos) << slurp(err_path);
  }
}

TEST(Isolation, TerminalInjectionIoctlIsDenied) {
  std::string out = python(
      "import fcntl, termios, errno, os\n"
      "try:\n"
      "    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\n"
      "except OSError as e:\n"
      "    print(errno.errorcode[e.errno])\n");
  EXPECT_EQ(out, "EPERM\n");
}

TEST(Isolation, ForeignArchitectureSyscallKillsTheProcess) {
  // An x32 syscall number (getpid | __X32_SYSCALL_BIT) would bypass a filter
  // that only knows x86_64 numbers.
  Result r = run({"python3", "-c",
                  "import ctypes\n"
                  "ctypes.CDLL(None).syscall(ctypes.c_long(0x40000000 | 39))\n"
                  "print('survived')\n"});
  EXPECT_EQ(r.status, RunStatus::kKilled);
  ASSERT_TRUE(r.signal.has_value());
  EXPECT_EQ(*r.signal, SIGSYS);
  EXPECT_EQ(r.stdout_data, "");
}

TEST(Isolation, CallersEnvironmentIsInvisible) {
  ::setenv("NSBOX_TEST_SECRET", "hunter2-secret", 1);
  Result r = run({"/usr/bin/env"});
  ::unsetenv("NSBOX_TEST_SECRET");
  ASSERT_EQ(r.status, RunStatus::kOk);
  EXPECT_EQ(r.stdout_data.find("hunter2"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("NSBOX_TEST_SECRET"), std::string::npos);
  EXPECT_NE(r.stdout_data.find("PATH=/usr/local/bin:/usr/bin:/bin"), std::string::npos);
}

TEST(Isolation, CliEnvFlagsAreTheOnlyAdditions) {
  ::setenv("NSBOX_TEST_SECRET", "hunter2-secret", 1);
  CliResult r = run_cli({"run", "--rootfs", test_rootfs(), "--env", "GREETING=hi", "--", "/usr/bin/env"});
  ::unsetenv("NSBOX_TEST_SECRET");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GREETING=hi"), std::string::npos);
  EXPECT_EQ(r.out.find("hunter2"), std::string::npos);
}

TEST(Isolation, HostnameIsNotTheHosts) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string out = python("import socket; print(socket.gethostname())");
  EXPECT_EQ(out, "sandbox\n");
  EXPECT_NE(out, std::string(host) + "\n");
}

// A new UTS namespace starts with the host's NIS domain name, which
// enterprise hosts set to a corporate one: the sandbox must not see it.
TEST(Isolation, TheHostsDomainNameIsNotSeen) {
  const auto [code, out] =
      run_cli_merged({"run", "--rootfs", test_rootfs(), "--", "python3", "-c", kPrintDomainName}, [] {
        // This test's own UTS namespace, never the host's.
        if (::unshare(CLONE_NEWUTS) != 0 || ::setdomainname(kHostDomainName, std::strlen(kHostDomainName)) != 0)
          ::_exit(99);
      });
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "(none)\n");
}

TEST(Isolation, NoHostFdLeaksIn) {
  // An fd the supervisor holds (here: a directory of the host) must not be
  // reachable from inside.
  int fd = ::open("/etc", O_RDONLY | O_DIRECTORY);  // deliberately not O_CLOEXEC
  ASSERT_GE(fd, 3);
  std::string out = python("import os; print(sorted(os.listdir('/proc/self/fd')))");
  ::close(fd);
  EXPECT_EQ(out, "['0', '1', '2', '3']\n") << "only stdio and listdir's own fd";
}

TEST(Isolation, DevHasOnlyTheMinimalNodes) {
  std::string out = python("import os; print(sorted(os.listdir('/dev')))");
  EXPECT_EQ(out,
            "['fd', 'full', 'null', 'ptmx', 'pts', 'random', 'shm', 'stderr', 'stdin', 'stdout', "
            "'tty', 'urandom', 'zero']\n");
}

TEST(Isolation, MaskedProcFilesAreEmpty) {
  // Only masks of files this kernel has can be checked; at least two must be.
  std::string present;
  for (const char* f : {"kcore",      "sysrq-trigger", "timer_list", "keys",       "sched_debug", "kallsyms", "cmdline",
                        "interrupts", "softirqs",      "diskstats",  "partitions", "buddyinfo",   "zoneinfo", "iomem",
                        "ioports",    "devices",       "misc",       "consoles",   "crypto",      "dma"}) {
    if (::access((std::string("/proc/") + f).c_str(), F_OK) == 0) present += std::string("'") + f + "',";
  }
  ASSERT_GE(std::count(present.begin(), present.end(), ','), 2) << present;
  std::string out = python(
      "import os\n"
      "for f in [" +
      present +
      "]:\n"
      "    print(f, len(open('/proc/' + f, 'rb').read(64)))\n"
      "print('sys', os.listdir('/proc/sys'))\n"
      "print('pressure', os.listdir('/proc/pressure') if os.path.isdir('/proc/pressure') else [])\n");
  std::string expected;
  for (size_t pos = 0; (pos = present.find('\'', pos)) != std::string::npos;) {
    size_t end = present.find('\'', pos + 1);
    expected += present.substr(pos + 1, end - pos - 1) + " 0\n";
    pos = end + 1;
  }
  EXPECT_EQ(out, expected + "sys []\npressure []\n");
}

TEST(Isolation, UnprivilegedCallerGetsItsOwnUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "already unprivileged: covered by the other tests";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      ::_exit(99);
    std::string root = test_rootfs();
    // Without cgroup write access the limits cannot be enforced: best-effort.
    ::execl(NSBOX_BINARY, "nsbox", "run", "--best-effort", "--rootfs", root.c_str(), "--", "cat", "/proc/self/uid_map",
            static_cast<char*>(nullptr));
    ::_exit(98);
  }
  ::close(out[1]);
  char buf[256] = {};
  ssize_t n = ::read(out[0], buf, sizeof(buf) - 1);
  ::close(out[0]);
  EXPECT_EQ(wait_cli(pid), 0);
  ASSERT_GT(n, 0);
  std::string map(buf);
  EXPECT_NE(map.find("65534"), std::string::npos);
  EXPECT_EQ(std::string(map).find(" 0 "), std::string::npos) << map;
  // The only host id an unprivileged user may map is its own.
  EXPECT_NE(map.find("65534      65534          1"), std::string::npos) << map;
}

// Run by an ordinary user, nsbox cannot cap the workspace (a tmpfs needs
// root): like a cgroup limit it cannot apply, a strict run is refused for
// it, and best-effort runs with a warning.
TEST(Isolation, AnUnprivilegedStrictRunIsRefusedForItsUncappedWorkspace) {
  if (::geteuid() != 0) GTEST_SKIP() << "switches to another user";
  TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0777), 0);
  auto run_as_nobody = [&](bool best_effort, std::string& err, const char* profile = "default") {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) return -1;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(pipe_fds[1], 2);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
          ::setresuid(65534, 65534, 65534) != 0)
        ::_exit(99);
      ::setenv("TMPDIR", tmp.path().c_str(), 1);
      const std::string root = test_rootfs();
      if (best_effort)
        ::execl(NSBOX_BINARY, "nsbox", "run", "--best-effort", "--profile", profile, "--rootfs", root.c_str(), "--",
                "true", static_cast<char*>(nullptr));
      else
        ::execl(NSBOX_BINARY, "nsbox", "run", "--profile", profile, "--rootfs", root.c_str(), "--", "true",
                static_cast<char*>(nullptr));
      ::_exit(98);
    }
    ::close(pipe_fds[1]);
    char buf[4096];
    for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
    ::close(pipe_fds[0]);
    return wait_cli(pid);
  };
  std::string strict_err, lenient_err;
  EXPECT_NE(run_as_nobody(false, strict_err), 0);
  EXPECT_NE(strict_err.find("workspace cannot be capped"), std::string::npos) << strict_err;
  EXPECT_NE(strict_err.find("best-effort"), std::string::npos) << strict_err;
  EXPECT_EQ(run_as_nobody(true, lenient_err), 0) << lenient_err;
  EXPECT_NE(lenient_err.find("workspace size not capped"), std::string::npos) << lenient_err;
  // strict has no workspace: its run cgroup is what an ordinary user
  // cannot make, and the refusal says what it was for and what would do.
  std::string cgroup_err;
  EXPECT_EQ(run_as_nobody(false, cgroup_err, "strict"), 125);
  EXPECT_NE(cgroup_err.find("(the run's cgroup, for its cpu, memory, pids limits: nsbox needs to run as root or in a "
                            "cgroup delegated to its user; limits.enforcement: best-effort runs without them)"),
            std::string::npos)
      << cgroup_err;
}

}  // namespace
}  // namespace nsbox::testing

namespace nsbox::testing {
namespace {

// Denied calls reach the supervisor (seccomp user notification): the
// workload sees EPERM as before, and the Result names each call.
TEST(SeccompNotify, DeniedCallsAreAnsweredEpermAndNamedInTheResult) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import ctypes\n"
                               "l = ctypes.CDLL(None, use_errno=True)\n"
                               "out = []\n"
                               "for nr, args in ((101, (16, 1, 0, 0)), (101, (0, 0, 0, 0)), (250, (0, -3, 0))):\n"
                               "    r = l.syscall(nr, *args)\n"
                               "    out.append(f'{r} {ctypes.get_errno()}')\n"
                               "print(', '.join(out))\n"});
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data << r.error;
  EXPECT_EQ(r.stdout_data, "-1 1, -1 1, -1 1\n") << "each denied call must fail with EPERM (1)";
  EXPECT_EQ(r.denied_syscalls, (std::map<std::string, uint64_t>{{"keyctl", 1}, {"ptrace", 2}}));
}

// Only unix and IP sockets may be made (the security suite's
// net_socket_families attacks the rest): what runtimes use keeps working,
// under the default and the strict policy, and one call past the line is
// refused and counted. Netlink answers EAFNOSUPPORT in the kernel, uncounted
// (glibc's getaddrinfo opens one to sort addresses, and goes on without).
TEST(SeccompNotify, RunsKeepTheSocketFamiliesTheyUseAndNoOther) {
  const char* code =
      "import errno, socket\n"
      "out = []\n"
      "for family, kind, proto in ((socket.AF_UNIX, socket.SOCK_STREAM, 0), (socket.AF_INET, socket.SOCK_DGRAM, 0),\n"
      "                            (socket.AF_INET6, socket.SOCK_STREAM, 0)):\n"
      "    socket.socket(family, kind, proto).close()\n"
      "    out.append(family.name)\n"
      "a, b = socket.socketpair()\n"
      "a.sendall(b'x'); out.append(b.recv(1).decode())\n"
      "for proto in (0, 9):\n"
      "    try:\n"
      "        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)\n"
      "    except OSError as e:\n"
      "        out.append(errno.errorcode[e.errno])\n"
      "found = socket.getaddrinfo('localhost', 80, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)\n"
      "out.append('resolved' if {a[4][0] for a in found} & {'127.0.0.1', '::1'} else str(found))\n"
      "try:\n"
      "    socket.socket(40, socket.SOCK_STREAM, 0)\n"  // AF_VSOCK
      "except OSError as e:\n"
      "    out.append(e.strerror)\n"
      "print(' '.join(out))\n";
  for (const auto kind : {SeccompChoice::kDefault, SeccompChoice::kStrict}) {
    RunSpec spec = capture_spec({"python3", "-c", code});
    spec.seccomp = SeccompChoice{.kind = kind, .allow = {}};
    Result r = run_with(spec);
    ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data << r.error;
    EXPECT_EQ(r.stdout_data, "AF_UNIX AF_INET AF_INET6 x EAFNOSUPPORT EAFNOSUPPORT resolved Operation not permitted\n")
        << "policy " << kind << ": " << r.stderr_data;
    EXPECT_EQ(r.denied_syscalls, (std::map<std::string, uint64_t>{{"socket", 1}})) << "policy " << kind;
  }
}

// Refused calls are answered at a pace, but received as they come: a call
// of another ABI made while answers wait (and interrupted by a signal
// before it was received, which withdraws it) still ends the run. Found by
// a review: a first version stopped reading the listener while it rested,
// and an x32 call interrupted by a timer went unseen, the run ending ok.
TEST(SeccompNotify, AForeignAbiCallIsSeenWhileRefusedCallsWaitForTheirAnswers) {
  // Every 16th refused call made the first version rest; the x32 call made
  // then is interrupted 2 ms later.
  RunSpec spec = capture_spec({"python3", "-c",
                               "import ctypes, signal\n"
                               "l = ctypes.CDLL(None, use_errno=True)\n"
                               "signal.signal(signal.SIGALRM, lambda *a: None)\n"
                               "for _ in range(300):\n"
                               "    for _ in range(16): l.syscall(101, 0, 0, 0, 0)\n"  // ptrace
                               "    signal.setitimer(signal.ITIMER_REAL, 0.002)\n"
                               "    l.syscall(0x40000000 | 39)\n"  // x32 getpid
                               "print('all returned', flush=True)\n"});
  spec.limits.wall_time = std::chrono::seconds(20);
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kKilled) << r.stdout_data << r.stderr_data << r.error;
  EXPECT_EQ(r.signal, SIGSYS);
  EXPECT_EQ(r.stdout_data, "");
  EXPECT_EQ(r.denied_syscalls.count("x32 getpid"), 1u);
}

TEST(SeccompNotify, CallsFromChildProcessesAndThreadsAreNamedToo) {
  RunSpec spec = capture_spec({"sh", "-c",
                               "python3 -c 'import os; os.chroot(\"/tmp\")' 2>/dev/null; "
                               "unshare -U true 2>/dev/null; echo done"});
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data << r.error;
  EXPECT_EQ(r.stdout_data, "done\n");
  EXPECT_EQ(r.denied_syscalls.count("chroot"), 1u);
  EXPECT_EQ(r.denied_syscalls.count("unshare"), 1u);
}

TEST(SeccompNotify, AStrictPolicyNamesWhatIsNotInItsList) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import os\ntry:\n    os.setpriority(os.PRIO_PROCESS, 0, 1)\nexcept OSError as e:\n    "
                               "print(e.errno)\n"});
  spec.seccomp = SeccompChoice{.kind = SeccompChoice::kStrict, .allow = {}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data << r.error;
  EXPECT_EQ(r.stdout_data, "1\n");
  EXPECT_EQ(r.denied_syscalls.count("setpriority"), 1u) << "setpriority is not in the strict list";
}

TEST(SeccompNotify, AForeignAbiCallKillsTheRunAndIsNamed) {
  RunSpec spec = capture_spec({"python3", "-c",
                               "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
                               "print('before', flush=True)\n"
                               "l.syscall(0x40000000 | 39)\n"  // x32 getpid
                               "print('after', flush=True)\n"});
  Result r = run_with(spec);
  EXPECT_EQ(r.status, RunStatus::kKilled) << r.stdout_data << r.stderr_data << r.error;
  EXPECT_EQ(r.signal, SIGSYS);
  EXPECT_EQ(r.stdout_data, "before\n") << "the call must never return";
  EXPECT_EQ(r.denied_syscalls, (std::map<std::string, uint64_t>{{"x32 getpid", 1}}));
  EXPECT_NE(r.error.find("x32 getpid is a system call of another ABI"), std::string::npos) << r.error;

  // An allow list without sendmsg has no listener: the kernel kills the process.
  std::vector<std::string> list;
  for (const auto& name : SeccompProgram::strict_syscalls())
    if (name != "sendmsg") list.push_back(name);
  spec.seccomp = SeccompChoice{.kind = SeccompChoice::kAllowList, .allow = list};
  Result k = run_with(spec);
  EXPECT_EQ(k.status, RunStatus::kKilled) << k.stdout_data << k.stderr_data << k.error;
  EXPECT_EQ(k.signal, SIGSYS);
  EXPECT_EQ(k.stdout_data, "before\n");
}

TEST(SeccompNotify, AnAllowListWithoutSendmsgStillRunsAndDeniesWithEperm) {
  // Such a workload cannot hand the listener over: the policy answers in the
  // kernel instead (unnamed), rather than leaving the first denied call to
  // wait for a supervisor that never gets the listener.
  std::vector<std::string> list;
  for (const auto& name : SeccompProgram::strict_syscalls())
    if (name != "sendmsg") list.push_back(name);
  RunSpec spec = capture_spec({"python3", "-c",
                               "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
                               "print(l.syscall(101, 16, 1, 0, 0), ctypes.get_errno())\n"});
  spec.seccomp = SeccompChoice{.kind = SeccompChoice::kAllowList, .allow = list};
  spec.limits.wall_time = std::chrono::seconds(20);
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << "hung or failed: " << r.stderr_data << r.error;
  EXPECT_EQ(r.stdout_data, "-1 1\n");
  EXPECT_TRUE(r.denied_syscalls.empty());
}

TEST(SeccompNotify, ADeniedCallStormStaysBoundedInTheResult) {
  // Under the strict policy, 150 distinct syscalls outside its list (none of
  // them runs: each is refused before the kernel acts), three times each:
  // every one fails with EPERM, the run ends normally and the Result keeps
  // at most 64 names.
  std::set<std::string> allowed(SeccompProgram::strict_syscalls().begin(), SeccompProgram::strict_syscalls().end());
  // Calls every policy answers in the kernel (ENOSYS, success) are not the list's to deny.
  const SeccompProgram strict = SeccompProgram::strict_policy();
  for (const auto& rule : strict.rules())
    if (rule.action != "EPERM") allowed.insert(rule.syscall);
  std::string numbers;
  int count = 0;
  for (int nr = 0; nr < 460 && count < 150; ++nr) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
    if (!name) continue;
    std::string n = name;
    std::free(name);
    if (allowed.count(n)) continue;
    numbers += (numbers.empty() ? "" : ",") + std::to_string(nr);
    ++count;
  }
  RunSpec spec = capture_spec({"python3", "-c",
                               "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\nbad = []\n"
                               "for _ in range(3):\n"
                               "    for nr in (" +
                                   numbers +
                                   ",):\n"
                                   "        if l.syscall(nr, 0, 0, 0, 0, 0) != -1 or ctypes.get_errno() != 1:\n"
                                   "            bad.append(nr)\n"
                                   "print('ok' if not bad else bad)\n"});
  spec.seccomp = SeccompChoice{.kind = SeccompChoice::kStrict, .allow = {}};
  Result r = run_with(spec);
  ASSERT_EQ(r.status, RunStatus::kOk) << r.stderr_data << r.error;
  EXPECT_EQ(r.stdout_data, "ok\n");
  EXPECT_EQ(r.denied_syscalls.size(), 64u);
  for (const auto& [name, n] : r.denied_syscalls) EXPECT_EQ(n, 3u) << name;
}

}  // namespace
}  // namespace nsbox::testing
