#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "fixture.h"

namespace nsbox::testing {
namespace {

TEST(Doctor, ReportsAWorkingHost) {
  CliResult r = run_cli({"doctor", "--rootfs", test_rootfs()});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* line : {"user namespace", "mount namespace", "pid namespace", "net namespace", "seccomp filters",
                           "test launch of /bin/true", "nsbox can run here"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  // This host (and the cgroup v2 guest) lets the fork server's children
  // create their namespaces, as ForkServer.* shows.
  EXPECT_NE(r.out.find("ok    namespaces created without privilege (fork_server)"), std::string::npos) << r.out;
  // As root here, nsbox takes each sandbox's seccomp listener out of it
  // rather than having it sent (UserNsQuotas.AnotherRunsDescriptorsInFlight...).
  EXPECT_NE(r.out.find("ok    descriptors taken from sandboxes (pidfd_getfd): taken"), std::string::npos) << r.out;
}

TEST(Doctor, ReportsWhatEachProfileWouldLoseHere) {
  TempDir dir;
  const std::string forked = dir.write("forked.yaml", "name: forked\nextends: default\nfork_server: true\n");
  const std::string unmountable = dir.write(
      "unmountable.yaml", "name: unmountable\nextends: default\nfilesystem:\n  mounts:\n    - {source: " + dir.path() +
                              "/missing, target: /data}\n");
  CliResult r = run_cli({"doctor", "--rootfs", test_rootfs(), "--profile", forked, "--profile", unmountable});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("profile forked\n  ok    limits: {cpu memory pids} enforced through cgroup v"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ok    fork_server: its runs can be forked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok    test launch of /bin/true under profile forked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL  test launch of /bin/true under profile unmountable: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir.path() + "/missing"), std::string::npos) << "the failure names the missing source\n"
                                                                    << r.out;
  EXPECT_NE(r.out.find("nsbox can run here, but not every profile as written: see FAIL lines"), std::string::npos)
      << r.out;

  CliResult unknown = run_cli({"doctor", "--rootfs", test_rootfs(), "--profile", "no-such-profile"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("no-such-profile"), std::string::npos) << unknown.err;
}

// Host root's inotify instances, as the kernel allows them now.
uint64_t host_inotify_instances() { return std::stoull(slurp("/proc/sys/fs/inotify/max_user_instances")); }

// Open files (fs.file-max, host-wide) and epoll watches (per host user, one
// for every sandbox) are bounded for a run only by its memory: doctor sizes
// them by max_concurrent x the largest limits.memory, read from the host.
TEST(Doctor, SizesOpenFilesAndEpollWatchesByTheRunsMemory) {
  TempDir dir;
  dir.write("small.yaml", "name: small\nextends: default\nlimits:\n  memory: 64MiB\n");
  const uint64_t file_max = std::stoull(slurp("/proc/sys/fs/file-max"));
  const uint64_t watch_max = std::stoull(slurp("/proc/sys/fs/epoll/max_user_watches"));
  const uint64_t files_each = (64ull << 20) / 430, watches_each = (64ull << 20) / 250;
  const uint64_t fitting = std::min(file_max / files_each, watch_max / watches_each) - 1;
  const uint64_t too_many = std::max(file_max / files_each, watch_max / watches_each) + 1;
  if (fitting < 1 || too_many > 4096) GTEST_SKIP() << "this host's counts do not fit 1..4096 runs of 64 MiB";
  auto node = [&](uint64_t runs) {
    return dir.write("node-" + std::to_string(runs) + ".yaml",
                     "tenants:\n  - {name: a, profile: " + dir.path() +
                         "/small.yaml}\nlimits:\n  max_concurrent: " + std::to_string(runs) + "\n");
  };
  CliResult ok = run_cli({"doctor", "--rootfs", test_rootfs(), "--config", node(fitting)});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("ok    open files: fs.file-max=" + std::to_string(file_max) + "; the runs hold at most " +
                        std::to_string(fitting) + " x 64MiB / 430 bytes = " + std::to_string(fitting * files_each)),
            std::string::npos)
      << ok.out;
  EXPECT_NE(ok.out.find("ok    epoll watches: fs.epoll.max_user_watches=" + std::to_string(watch_max)),
            std::string::npos)
      << ok.out;
  CliResult warned = run_cli({"doctor", "--rootfs", test_rootfs(), "--config", node(too_many)});
  EXPECT_EQ(warned.exit_code, 0) << warned.out << warned.err;
  EXPECT_NE(
      warned.out.find("warn  open files: fs.file-max=" + std::to_string(file_max) + "; the runs could hold " +
                      std::to_string(too_many) + " x 64MiB / 430 bytes = " + std::to_string(too_many * files_each) +
                      ": all of it, and the host's other processes get ENFILE"),
      std::string::npos)
      << warned.out;
  EXPECT_NE(warned.out.find("warn  epoll watches: fs.epoll.max_user_watches=" + std::to_string(watch_max) +
                            "; the runs could hold"),
            std::string::npos)
      << warned.out;
}

// The runs of a node share host root's per-user quotas: doctor warns when a
// node's max_concurrent runs could take all of one, and checks the tenants'
// profiles. The host's sysctls are read, never changed: max_concurrent is
// chosen to fit or not.
TEST(Doctor, SizesHostRootsQuotasForTheNodesRuns) {
  TempDir dir;
  dir.write("few.yaml", "name: few\nextends: default\nlimits:\n  inotify_instances: 2\n");
  const uint64_t host = host_inotify_instances();
  constexpr uint64_t kMostConcurrent = 4096;                         // what max_concurrent may say
  const uint64_t fitting = std::min(host / 2 - 1, kMostConcurrent);  // x 2 each leaves root some
  const std::string fits =
      dir.write("fits.yaml", "tenants:\n  - name: a\n    profile: " + dir.path() + "/few.yaml\n  - name: b\n" +
                                 "    profile: " + dir.path() +
                                 "/few.yaml\nlimits:\n  max_concurrent: " + std::to_string(fitting) + "\n");
  CliResult ok = run_cli({"doctor", "--rootfs", test_rootfs(), "--config", fits});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("info  runs alive at once: " + std::to_string(fitting) + " (max_concurrent of " + fits + ")"),
            std::string::npos)
      << ok.out;
  EXPECT_NE(ok.out.find("ok    inotify instances: fs.inotify.max_user_instances=" + std::to_string(host) +
                        "; the runs hold at most " + std::to_string(fitting) + " x 2 = "),
            std::string::npos)
      << ok.out;
  // Two tenants, one profile: checked once.
  EXPECT_NE(ok.out.find("profile few\n"), std::string::npos) << ok.out;
  EXPECT_EQ(ok.out.find("profile few\n"), ok.out.rfind("profile few\n")) << ok.out;
  EXPECT_NE(ok.out.find("ok    test launch of /bin/true under profile few"), std::string::npos) << ok.out;

  // One run more than host root's quota holds, each with `each` instances
  // (the default 8, or more on a host whose quota is past 4096 runs' worth).
  const uint64_t each = std::max<uint64_t>(8, host / (kMostConcurrent - 1));
  const uint64_t too_many = host / each + 1;
  dir.write("many.yaml", "name: many\nextends: default\nlimits:\n  inotify_instances: " + std::to_string(each) + "\n");
  const std::string crowded =
      dir.write("crowded.yaml", "tenants:\n  - {name: a, profile: " + dir.path() +
                                    "/many.yaml}\nlimits:\n  max_concurrent: " + std::to_string(too_many) + "\n");
  CliResult warned = run_cli({"doctor", "--rootfs", test_rootfs(), "--config", crowded});
  EXPECT_EQ(warned.exit_code, 0) << "a quota to raise is a warning\n" << warned.out;
  EXPECT_NE(warned.out.find("warn  inotify instances: fs.inotify.max_user_instances=" + std::to_string(host) +
                            "; the runs could hold " + std::to_string(too_many) + " x " + std::to_string(each) + " = " +
                            std::to_string(too_many * each) + " of it: all of host root's"),
            std::string::npos)
      << warned.out;

  CliResult broken =
      run_cli({"doctor", "--config",
               dir.write("broken.yaml", "tenants:\n  - {name: a, profile: default}\nlimits:\n  max_concurent: 2\n")});
  EXPECT_EQ(broken.exit_code, 2) << broken.out;
  EXPECT_NE(broken.err.find("--config: "), std::string::npos) << broken.err;
  EXPECT_NE(broken.err.find("max_concurent"), std::string::npos) << broken.err;
}

// Pending signals are checked against this process's RLIMIT_SIGPENDING,
// which doctor inherits: lowered here below what 4 runs may hold.
TEST(Doctor, WarnsWhenTheRunsCouldTakeAllOfRootsPendingSignals) {
  TempDir dir;
  const std::string four =
      dir.write("four.yaml", "tenants:\n  - {name: a, profile: default}\nlimits:\n  max_concurrent: 4\n");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_SIGPENDING, &saved), 0);
  ASSERT_GT(saved.rlim_max, 3000u);
  rlimit lowered = saved;
  lowered.rlim_cur = 3000;
  ASSERT_EQ(::setrlimit(RLIMIT_SIGPENDING, &lowered), 0);
  CliResult r = run_cli({"doctor", "--rootfs", test_rootfs(), "--config", four});
  ASSERT_EQ(::setrlimit(RLIMIT_SIGPENDING, &saved), 0);
  EXPECT_NE(r.out.find("warn  pending signals: RLIMIT_SIGPENDING of this process=3000; the runs could hold 4 x 1024 "
                       "= 4096 of it"),
            std::string::npos)
      << r.out;
}

// Run by an ordinary user, every default run is refused (no run cgroup, no
// capped workspace): doctor's launch is a default run, so it says so and
// fails, where a bare sandbox's launch once said "nsbox can run here".
TEST(Doctor, AnOrdinaryUserIsToldThatDefaultRunsAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "switches to another user";
  TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0777), 0);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      ::_exit(99);
    ::setenv("TMPDIR", tmp.path().c_str(), 1);
    const std::string root = test_rootfs();
    ::execl(NSBOX_BINARY, "nsbox", "doctor", "--rootfs", root.c_str(), static_cast<char*>(nullptr));
    ::_exit(98);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  EXPECT_EQ(wait_cli(pid), 1) << text;
  EXPECT_NE(text.find("FAIL  test launch of /bin/true under the default profile: "), std::string::npos) << text;
  EXPECT_NE(text.find("nsbox cannot run here with its defaults"), std::string::npos) << text;
}

// A default profile that does not load is doctor's finding, reported with
// the rest of the host, not a bad command line that hides the report.
TEST(Doctor, ADefaultProfileThatDoesNotLoadIsAFailLine) {
  TempDir dir;
  const std::string bin = dir.path() + "/bin";
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  std::filesystem::copy_file(NSBOX_BINARY, bin + "/nsbox");
  ASSERT_EQ(::mkdir((dir.path() + "/profiles").c_str(), 0755), 0);
  const std::string planted = dir.write("profiles/default.yaml", "name: default\n");
  ASSERT_EQ(::chmod(planted.c_str(), 0666), 0);
  CliResult r = run_cli_with_binary(bin + "/nsbox", {"doctor", "--rootfs", test_rootfs()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL  default profile: profile " + planted + ": not trusted: writable by group or others"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("ok    seccomp"), std::string::npos) << "the rest of the report is there\n" << r.out;
}

TEST(Doctor, MissingRootfsFails) {
  CliResult r = run_cli({"doctor", "--rootfs", "/nonexistent/rootfs"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("FAIL  rootfs /nonexistent/rootfs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tools/build-rootfs"), std::string::npos);
}

}  // namespace
}  // namespace nsbox::testing
