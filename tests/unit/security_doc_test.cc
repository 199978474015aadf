// docs/SECURITY.md must list every seccomp rule the code installs.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "nsbox/seccomp.h"

namespace nsbox {
namespace {

TEST(SecurityDoc, ListsEverySeccompRule) {
  std::ifstream in(std::string(NSBOX_SOURCE_DIR) + "/docs/SECURITY.md");
  ASSERT_TRUE(in) << "docs/SECURITY.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  SeccompProgram p = SeccompProgram::default_policy();
  for (const auto& r : p.rules()) {
    std::string row = "| `" + r.syscall + "` | " + (r.condition.empty() ? "always" : r.condition) + " | " + r.action +
                      " | " + r.reason + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/SECURITY.md lacks the row:\n" << row;
  }
}

}  // namespace
}  // namespace nsbox
