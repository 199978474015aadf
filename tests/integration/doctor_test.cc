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

TEST(Doctor, MissingRootfsFails) {
  CliResult r = run_cli({"doctor", "--rootfs", "/nonexistent/rootfs"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("FAIL  rootfs /nonexistent/rootfs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tools/build-rootfs"), std::string::npos);
}

}  // namespace
}  // namespace nsbox::testing
