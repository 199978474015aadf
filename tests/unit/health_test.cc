// When /health says the node cannot give its runs a sandbox.
#include "nsbox/health.h"

#include <gtest/gtest.h>

namespace nsbox {
namespace {

using namespace std::chrono_literals;
using Change = SandboxHealth::Change;
constexpr bool kGotOne = true;
constexpr bool kNoSandbox = false;

TEST(SandboxHealth, FiveRunsInARowWithoutASandboxDegradeTheNodeAndOneWithOneMendsIt) {
  SandboxHealth health;
  const auto t0 = SandboxHealth::Clock::now();
  for (uint32_t i = 1; i < SandboxHealth::kFailuresInARow; ++i) {
    EXPECT_EQ(health.run_finished(kNoSandbox, t0), Change::kNone) << i;
    EXPECT_FALSE(health.degraded(t0)) << "a few failures are a run's bad luck, not the node's";
  }
  EXPECT_EQ(health.run_finished(kNoSandbox, t0 + 1s), Change::kDegraded);
  const auto why = health.degraded(t0 + 1s);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "the last 5 runs got no sandbox; the node's log says why")
      << "/health answers anyone: no tenant, path or error text";
  EXPECT_EQ(health.run_finished(kNoSandbox, t0 + 2s), Change::kNone) << "said once";
  EXPECT_EQ(health.run_finished(kGotOne, t0 + 3s), Change::kRecovered);
  EXPECT_FALSE(health.degraded(t0 + 3s));
  EXPECT_EQ(health.failures_total(), 6u);
}

TEST(SandboxHealth, ARunWithASandboxBetweenFailuresStartsTheCountAgain) {
  SandboxHealth health;
  const auto t0 = SandboxHealth::Clock::now();
  for (int round = 0; round < 3; ++round) {
    for (uint32_t i = 1; i < SandboxHealth::kFailuresInARow; ++i) health.run_finished(kNoSandbox, t0);
    EXPECT_EQ(health.run_finished(kGotOne, t0), Change::kNone);
  }
  EXPECT_FALSE(health.degraded(t0));
  EXPECT_EQ(health.failures_total(), 12u);
}

// A balancer sends a degraded node nothing, so nothing would ever mend it:
// it says ok once the hold passes, and the next failures degrade it again.
TEST(SandboxHealth, ANodeNoRunReachesSaysOkAfterTheHoldAndTheNextFailureDegradesItAgain) {
  SandboxHealth health;
  const auto t0 = SandboxHealth::Clock::now();
  for (uint32_t i = 0; i < SandboxHealth::kFailuresInARow; ++i) health.run_finished(kNoSandbox, t0);
  EXPECT_TRUE(health.degraded(t0 + SandboxHealth::kHold - 1ms));
  EXPECT_FALSE(health.degraded(t0 + SandboxHealth::kHold));
  const auto later = t0 + SandboxHealth::kHold + 5s;
  EXPECT_EQ(health.run_finished(kNoSandbox, later), Change::kDegraded) << "said again: it had said ok";
  EXPECT_TRUE(health.degraded(later));
  EXPECT_EQ(health.run_finished(kGotOne, later + 1s), Change::kRecovered);
}

}  // namespace
}  // namespace nsbox
