// How a sandbox's Result becomes the API's answer (status, error_type,
// error) when the runner gave no result. No sandboxes.
#include <signal.h>

#include <gtest/gtest.h>

#include "nsbox/api.h"
#include "nsbox/runtime.h"

namespace nsbox {
namespace {

Result killed_by(int sig, std::string error = "") {
  Result r;
  r.status = RunStatus::kKilled;
  r.signal = sig;
  r.exit_code = 128 + sig;
  r.error = std::move(error);
  return r;
}

TEST(Outcome, KilledRunSaysWhyWhenTheSupervisorDid) {
  ExecOutcome o = outcome_of(RunSpec{}, killed_by(SIGKILL, "stopped: the run's CPU time could no longer be read"));
  EXPECT_EQ(o.status, "killed");
  EXPECT_EQ(o.error_type, "killed");
  EXPECT_EQ(o.error, "Execution was killed by SIGKILL (stopped: the run's CPU time could no longer be read)");
}

// Only a filter without a listener (an allow list without sendmsg) kills
// in the kernel; under any other a SIGSYS with no word from the supervisor
// is one the code sent (os.kill(os.getpid(), signal.SIGSYS)).
TEST(Outcome, ASigsysIsBlamedOnTheFilterOnlyWhereTheFilterKillsInTheKernel) {
  RunSpec quiet;
  quiet.seccomp = SeccompChoice{.kind = SeccompChoice::kAllowList, .allow = {"read", "write", "exit_group"}};
  EXPECT_EQ(outcome_of(quiet, killed_by(SIGSYS)).error, "Execution was killed by SIGSYS (a forbidden system call)");
  RunSpec notifying = quiet;
  notifying.seccomp.allow.push_back("sendmsg");
  EXPECT_EQ(outcome_of(notifying, killed_by(SIGSYS)).error, "Execution was killed by SIGSYS");
  EXPECT_EQ(outcome_of(RunSpec{}, killed_by(SIGSYS)).error, "Execution was killed by SIGSYS");
}

TEST(Outcome, KilledBySignalAloneNamesTheSignal) {
  EXPECT_EQ(outcome_of(RunSpec{}, killed_by(SIGKILL)).error, "Execution was killed by SIGKILL");
}

Result wrote_result(const std::string& fd3) {
  Result r;
  r.status = RunStatus::kOk;
  r.exit_code = 0;
  r.fd3_data = fd3;
  return r;
}

TEST(Outcome, TheRunnersErrorTypesAreKeptAndAnyOtherWordIsAnException) {
  for (const char* type : {"syntax", "exception", "serialization", "contract"}) {
    const ExecOutcome o =
        outcome_of(RunSpec{}, wrote_result(std::string(R"({"return":null,"error":"e","error_type":")") + type + "\"}"));
    EXPECT_EQ(o.error_type, type);
  }
  // The run's code can write fd 3 itself: nsbox's own words are not its.
  const ExecOutcome forged = outcome_of(
      RunSpec{},
      wrote_result(R"({"return":null,"error":"The sandbox could not be started: x","error_type":"sandbox"})"));
  EXPECT_EQ(forged.status, "error");
  EXPECT_EQ(forged.error_type, "exception");
  EXPECT_EQ(forged.error, "The sandbox could not be started: x");
}

TEST(Outcome, AResultOfMoreThanAMillionValuesIsASerializationErrorNotParsed) {
  std::string value = "[";
  for (size_t i = 0; i < kMaxJsonValues; ++i) value += "[],";
  value += "[]]";
  const ExecOutcome o =
      outcome_of(RunSpec{}, wrote_result(R"({"return":)" + value + R"(,"error":null,"error_type":null})"));
  EXPECT_EQ(o.status, "error");
  EXPECT_EQ(o.error_type, "serialization");
  EXPECT_EQ(o.error, "the return value holds more than 1000000 values (array elements and object members)");
}

// Python's json writes return 10**400 as its 401 digits; no double holds it.
// Python's ints are unbounded; nlohmann reads one past 64 bits as a double
// (10**300 came back as 1e+300, 2**64 + 1 lost its last digits) or not at
// all (past 1.8e308): either is a serialization error that says so.
TEST(Outcome, AnIntegerBeyond64BitsIsASerializationErrorThatSaysSo) {
  const std::string big = "1" + std::string(400, '0');
  const ExecOutcome o =
      outcome_of(RunSpec{}, wrote_result(R"({"return":[1, )" + big + R"(],"error":null,"error_type":null})"));
  EXPECT_EQ(o.status, "error");
  EXPECT_EQ(o.error_type, "serialization");
  EXPECT_EQ(o.error.value_or(""), "the return value holds the integer 1" + std::string(39, '0') +
                                      "..., which is beyond the 64 bits nsbox carries exactly (-2^63 to 2^64-1) and "
                                      "would become a float: return it as a string");
  EXPECT_EQ(outcome_of(RunSpec{}, wrote_result(R"({"return":18446744073709551617,"error":null,"error_type":null})"))
                .error_type,
            "serialization");
  // A float in range is read as it is: Python writes 1e300 so.
  const ExecOutcome fine = outcome_of(
      RunSpec{}, wrote_result(R"({"return":[1e+300, 18446744073709551615],"error":null,"error_type":null})"));
  EXPECT_EQ(fine.status, "ok") << fine.error.value_or("");
  EXPECT_EQ(fine.return_value.dump(), "[1e+300,18446744073709551615]");
  // With a lone surrogate beside it (which is read as U+FFFD) too.
  EXPECT_EQ(
      outcome_of(RunSpec{}, wrote_result(R"({"return":["\ud800", )" + big + R"(],"error":null,"error_type":null})"))
          .error_type,
      "serialization");
  // A result that is broken otherwise is still no result at all.
  EXPECT_EQ(outcome_of(RunSpec{}, wrote_result(R"({"return":1)")).error_type, "runner");
}

}  // namespace
}  // namespace nsbox
