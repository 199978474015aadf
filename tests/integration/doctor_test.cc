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

TEST(Doctor, MissingRootfsFails) {
  CliResult r = run_cli({"doctor", "--rootfs", "/nonexistent/rootfs"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("FAIL  rootfs /nonexistent/rootfs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tools/build-rootfs"), std::string::npos);
}

}  // namespace
}  // namespace nsbox::testing
