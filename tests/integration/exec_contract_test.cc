// The agent contract through nsbox exec's code path (run_exec): every case of
// tests/runners/cases.json (the runners' table, docs/RUNNERS.md) asserts the
// exact return, the status and the key part of the error, in a real sandbox
// built from the default profile.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "nsbox/profile_apply.h"
#include "nsbox/profile_loader.h"
#include "nsbox/runtime.h"

namespace nsbox::testing {
namespace {

using nlohmann::json;

RunSpec spec_for(const json& c) {
  RunSpec spec = spec_from_profile(load_profile("default", ProfileSearch{}));
  spec.rootfs = test_rootfs();
  const std::string status = c["expected"].value("status", "");
  if (status == "timeout") spec.limits.wall_time = std::chrono::seconds(1);
  if (status == "oom") spec.limits.cgroup.memory_bytes = 128 << 20;
  return spec;
}

std::vector<std::string> as_list(const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  return v.get<std::vector<std::string>>();
}

class ExecContract : public ::testing::TestWithParam<json> {};

// The case run as nsbox exec runs it; a raw request goes to the runner's
// stdin byte for byte instead of the request nsbox would build.
ExecOutcome run_case(const json& c) {
  if (!c.contains("raw_request")) return run_exec(launcher(), spec_for(c), contract_request(c));
  RunSpec spec = exec_spec(spec_for(c), *parse_language(c["language"].get<std::string>()));
  spec.stdin_data = c["raw_request"].get<std::string>();
  return outcome_of(spec, launcher().run(spec));
}

TEST_P(ExecContract, Case) {
  const json& c = GetParam();
  const json& exp = c["expected"];
  ExecOutcome o = run_case(c);
  const std::string error = o.error.value_or("");
  SCOPED_TRACE("status " + o.status + ", error: " + error.substr(0, 2000) +
               "\nstderr: " + o.run.stderr_data.substr(0, 2000));

  const std::string status = exp.value("status", "");
  if (status == "no_result") {
    EXPECT_EQ(o.status, "error");
    EXPECT_EQ(o.error_type, "runner");
    EXPECT_NE(error.find("status " + std::to_string(exp["exit_code"].get<int>())), std::string::npos);
    return;
  }
  if (!status.empty()) {
    EXPECT_EQ(o.status, status);
    EXPECT_TRUE(o.return_value.is_null());
    if (exp.value("no_process_left", false)) {
      EXPECT_TRUE(host_pids_with_cmdline("sleep 1000").empty());
    }
    return;
  }

  const bool error_expected = exp.contains("error") || exp.contains("error_contains");
  EXPECT_EQ(o.status, error_expected ? "error" : "ok");
  if (exp.contains("error_type")) {
    EXPECT_EQ(o.error_type, exp["error_type"].is_null() ? std::string() : exp["error_type"].get<std::string>());
  }
  if (!error_expected) {
    EXPECT_FALSE(o.error.has_value());
  }
  if (exp.contains("error")) {
    EXPECT_EQ(error, exp["error"].get<std::string>());
  }
  if (exp.contains("error_contains")) {
    for (const auto& part : as_list(exp["error_contains"])) {
      EXPECT_NE(error.find(part), std::string::npos) << part;
    }
  }
  if (exp.contains("error_not_contains")) {
    for (const auto& part : as_list(exp["error_not_contains"])) {
      EXPECT_EQ(error.find(part), std::string::npos) << part;
    }
  }
  if (exp.contains("return_depth")) {
    int depth = 0;  // of the lists nested in the return value
    for (const auto* v = &o.return_value; v != nullptr && v->is_array(); v = v->empty() ? nullptr : &v->front())
      ++depth;
    EXPECT_EQ(depth, exp["return_depth"].get<int>());
  } else if (exp.contains("return_length")) {
    ASSERT_TRUE(o.return_value.is_string());
    // Length in characters, as the runners count it: UTF-8 lead bytes.
    const std::string text = o.return_value.get<std::string>();
    size_t chars = std::count_if(text.begin(), text.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
    EXPECT_EQ(chars, exp["return_length"].get<size_t>());
  } else {
    // Compared canonically: the result keeps the code's key order, the table does not.
    EXPECT_EQ(json::parse(o.return_value.dump()), exp.value("return", json(nullptr)));
  }
  if (exp.contains("stdout")) {
    EXPECT_EQ(o.run.stdout_data, exp["stdout"].get<std::string>());
  }
  if (exp.contains("stderr")) {
    EXPECT_EQ(o.run.stderr_data, exp["stderr"].get<std::string>());
  }
  if (exp.contains("stdout_length")) {
    // The profile caps what is returned; the rest is drained and flagged.
    const size_t cap = spec_for(c).limits.stdout_bytes;
    const size_t want = exp["stdout_length"].get<size_t>();
    EXPECT_EQ(o.run.stdout_data.size(), std::min(want, cap));
    EXPECT_EQ(o.run.stdout_truncated, want > cap);
  }
  if (exp.contains("stderr_contains")) {
    EXPECT_NE(o.run.stderr_data.find(exp["stderr_contains"].get<std::string>()), std::string::npos);
  }
}

std::string case_name(const ::testing::TestParamInfo<json>& info) {
  std::string name = info.param["name"];
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

// The cases a limit ends (a wall-time limit, a memory limit the cgroup
// enforces) apart from the rest, whose answers no cgroup or kernel shapes:
// the rest are labelled userspace (tests/CMakeLists.txt), and the cgroup v2
// guest runs only the limit cases.
std::vector<json> cases_ended_by_a_limit(bool ended) {
  std::vector<json> out;
  for (const auto& c : contract_cases()) {
    const std::string status = c["expected"].value("status", "");
    if ((status == "oom" || status == "timeout") == ended) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, ExecContract, ::testing::ValuesIn(cases_ended_by_a_limit(false)), case_name);
INSTANTIATE_TEST_SUITE_P(LimitCases, ExecContract, ::testing::ValuesIn(cases_ended_by_a_limit(true)), case_name);

TEST(ExecContractTable, HasAtLeastFortyCasesAcrossBothLanguages) {
  size_t python = 0, js = 0;
  for (const auto& c : contract_cases()) (c["language"] == "python" ? python : js)++;
  EXPECT_GE(python + js, 40u);
  EXPECT_GE(python, 15u);
  EXPECT_GE(js, 15u);
}

TEST(ExecCli, PrintsThePlatformsShapeAndExitsZeroForUserErrors) {
  char path[] = "/tmp/nsboxtest-code-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string code = "def main(args):\n    raise ValueError('bad ' + args.params['x'])\n";
  ASSERT_EQ(::write(fd, code.data(), code.size()), static_cast<ssize_t>(code.size()));
  ::close(fd);
  CliResult r = run_cli(
      {"exec", "--rootfs", test_rootfs(), "--lang", "python", "--code", path, "--inputs", "{\"x\": \"input\"}"});
  ::unlink(path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_TRUE(out["return"].is_null());
  EXPECT_NE(out["error"].get<std::string>().find("ValueError: bad input"), std::string::npos);
  EXPECT_EQ(out["status"], "error");
  for (const char* key : {"stdout", "stderr", "usage"}) EXPECT_TRUE(out.contains(key)) << key;
  EXPECT_TRUE(out["usage"].contains("wall_ms"));
  EXPECT_TRUE(out["usage"].contains("cpu_ms"));
  EXPECT_TRUE(out["usage"].contains("peak_memory_bytes"));
}

TEST(ExecCli, TimeoutKillsEvenASigtermIgnoringLoopWithThePlatformsMessage) {
  ExecRequest request;
  request.code =
      "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ndef main(args):\n    while True: pass\n";
  RunSpec spec = spec_from_profile(load_profile("default", ProfileSearch{}));
  spec.rootfs = test_rootfs();
  spec.limits.wall_time = std::chrono::seconds(1);
  ExecOutcome o = run_exec(launcher(), spec, request);
  EXPECT_EQ(o.status, "timeout");
  EXPECT_EQ(o.error.value_or(""), "Execution timed out (> 1 seconds).");
  EXPECT_LT(o.run.wall_ms, 3000);
}

TEST(ExecCli, EmptyCodeIsRefusedBeforeAnySandbox) {
  ExecRequest request;
  request.code = "  \n";
  ExecOutcome o = run_exec(launcher(), capture_spec({}), request);
  EXPECT_EQ(o.status, "error");
  EXPECT_EQ(o.error.value_or(""), "No code provided.");
  EXPECT_EQ(o.run.wall_ms, 0) << "no sandbox was started";
}

TEST(ExecCli, BadLanguageAndInputsAreUsageErrors) {
  CliResult r = run_cli({"exec", "--lang", "ruby", "--code", "/dev/null"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unsupported language 'ruby'"), std::string::npos) << r.err;
  r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs", "[1]"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--inputs: must be a JSON object"), std::string::npos) << r.err;
  r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs", "{\"a\":"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--inputs: not valid JSON: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unexpected end of input"), std::string::npos) << "the parser's reason\n" << r.err;
  r = run_cli({"exec", "--lang", "python", "--code", "/tmp", "--inputs", "{}"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--code: cannot read /tmp: Is a directory"), std::string::npos) << r.err;
  // An endless file is read only so far: once it was read until memory ran out.
  r = run_cli({"exec", "--lang", "python", "--code", "/dev/zero"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--code: /dev/zero holds more than 64MiB"), std::string::npos) << r.err;
  r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs-file", "/dev/zero"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--inputs-file: /dev/zero holds more than 64MiB"), std::string::npos) << r.err;
}

TEST(Cli, AnUnknownCommandIsNamedWithTheCommandsThereAre) {
  CliResult r = run_cli({"bogus", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "nsbox: unknown command 'bogus': the commands are run, exec, check, serve, doctor (see nsbox --help)\n");
  r = run_cli({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("A subcommand is required"), std::string::npos) << r.err;
}

TEST(ExecCli, DeeplyNestedInputsAreRefusedNotACrash) {
  // The JSON parser recurses: 60000 levels once overflowed its stack.
  TempDir dir;
  const std::string deep = dir.write("deep.json", std::string(60000, '[') + std::string(60000, ']'));
  CliResult r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs-file", deep});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--inputs-file " + deep + ": nested deeper than 1000 levels"), std::string::npos) << r.err;
}

TEST(ExecCli, InputsWithANulByteAreRefused) {
  // The JSON parser stops at a NUL byte: the rest would have been ignored.
  TempDir dir;
  const std::string inputs = dir.write("nul.json", std::string("{\"a\": 1}\0{\"b\": 2}", 17));
  CliResult r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs-file", inputs});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--inputs-file " + inputs + ": not valid JSON: a NUL byte at offset 8"), std::string::npos)
      << r.err;
}

TEST(ExecCli, InputsWithANumberTooLargeForADoubleAreRefusedNotACrash) {
  // nlohmann throws out_of_range, not parse_error, for 1e999: it aborted nsbox.
  CliResult r = run_cli({"exec", "--lang", "python", "--code", "/dev/null", "--inputs", "{\"a\": 1e999}"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--inputs: not valid JSON: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("number overflow"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nsbox::testing
