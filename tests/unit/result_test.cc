#include "nsbox/result.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace nsbox {
namespace {

TEST(Result, JsonHasEveryField) {
  Result r;
  r.status = RunStatus::kKilled;
  r.exit_code = 143;
  r.signal = 15;
  r.stdout_data = "out";
  r.stderr_truncated = true;
  r.wall_ms = 12;
  r.cpu_ms = 3;
  auto j = to_json(r);
  EXPECT_EQ(j["status"], "killed");
  EXPECT_EQ(j["exit_code"], 143);
  EXPECT_EQ(j["signal"], 15);
  EXPECT_EQ(j["stdout"], "out");
  EXPECT_EQ(j["stderr"], "");
  EXPECT_EQ(j["stdout_truncated"], false);
  EXPECT_EQ(j["stderr_truncated"], true);
  EXPECT_EQ(j["wall_ms"], 12);
  EXPECT_EQ(j["cpu_ms"], 3);
  EXPECT_TRUE(j["error"].is_null());
}

TEST(Result, StatusNames) {
  EXPECT_STREQ(to_string(RunStatus::kOk), "ok");
  EXPECT_STREQ(to_string(RunStatus::kExitNonzero), "exit_nonzero");
  EXPECT_STREQ(to_string(RunStatus::kTimeout), "timeout");
  EXPECT_STREQ(to_string(RunStatus::kSetupError), "setup_error");
}

TEST(Result, InvalidUtf8OutputStillSerialises) {
  Result r;
  r.stdout_data = std::string("\xff\xfe ok", 5);
  std::string text = to_json(r).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  EXPECT_NE(text.find("ok"), std::string::npos);
}

}  // namespace
}  // namespace nsbox
