#include "nsbox/run_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nsbox/error.h"

namespace nsbox {
namespace {

TEST(EnvAssignment, SplitsAtFirstEquals) {
  auto [k, v] = parse_env_assignment("A=b=c");
  EXPECT_EQ(k, "A");
  EXPECT_EQ(v, "b=c");
  auto [k2, v2] = parse_env_assignment("EMPTY=");
  EXPECT_EQ(k2, "EMPTY");
  EXPECT_EQ(v2, "");
}

TEST(EnvAssignment, RejectsMissingKey) {
  EXPECT_THROW(parse_env_assignment("=x"), UsageError);
  EXPECT_THROW(parse_env_assignment("NOEQUALS"), UsageError);
}

TEST(EnvAssignment, RejectsANameNoShellCouldSet) {
  for (const char* bad : {"A B=1", "1A=x", "A-B=1", "A\nB=1"}) {
    try {
      parse_env_assignment(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a valid variable name"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_env_assignment("_a1=x").first, "_a1");
}

// --env is held to what a profile's env is: no loader variables, and no
// variable past what the kernel passes to a program.
TEST(EnvAssignment, RefusesWhatAProfileRefuses) {
  const std::vector<std::string> refused = {"LD_PRELOAD=/x.so", "LD_LIBRARY_PATH=/x", "LD_AUDIT=/x.so",
                                            "BIG=" + std::string(kMaxEnvEntry, 'x')};
  for (const std::string& bad : refused) EXPECT_THROW(parse_env_assignment(bad), UsageError) << bad.substr(0, 40);
  EXPECT_EQ(parse_env_assignment("FITS=" + std::string(kMaxEnvEntry - 6, 'x')).second.size(), kMaxEnvEntry - 6);
}

TEST(Environment, DefaultsAreCleanAndOverridable) {
  auto env = default_environment();
  bool has_path = false;
  for (const auto& [k, v] : env) {
    if (k == "PATH") has_path = true;
    EXPECT_NE(k, "LD_PRELOAD");
  }
  EXPECT_TRUE(has_path);
  set_env(env, "HOME", "/work");
  set_env(env, "NEW", "1");
  int homes = 0;
  for (const auto& [k, v] : env) {
    if (k == "HOME") {
      ++homes;
      EXPECT_EQ(v, "/work");
    }
  }
  EXPECT_EQ(homes, 1);
  EXPECT_EQ(env.back().first, "NEW");
}

TEST(Validate, NamesTheBadField) {
  RunSpec spec;
  spec.rootfs = "/r";
  EXPECT_THROW(validate(spec), UsageError);  // no command
  spec.argv = {"true"};
  EXPECT_NO_THROW(validate(spec));
  spec.cwd = "relative";
  try {
    validate(spec);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cwd"), std::string::npos);
  }
  spec.cwd = "/tmp";
  spec.rootfs = "rel/root";
  EXPECT_THROW(validate(spec), UsageError);
}

}  // namespace
}  // namespace nsbox
