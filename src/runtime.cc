#include "nsbox/runtime.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string_view>

#include "nsbox/api.h"
#include "nsbox/seccomp.h"

namespace nsbox {
namespace {

// What the runner's fd 3 may contain: exactly these keys.
constexpr const char* kResultKeys[] = {"return", "error", "error_type"};
// What the runners say went wrong (docs/RUNNERS.md). The run's own code can
// write fd 3 too: another word, such as nsbox's own "sandbox" (which the
// node answers with 500 and logs as its own failure), is read as an
// exception of the code's.
constexpr std::string_view kRunnerErrorTypes[] = {"syntax", "exception", "serialization", "contract"};

std::string runner_error_type(const nlohmann::ordered_json& type) {
  if (type.is_string()) {
    const std::string t = type.get<std::string>();
    if (std::find(std::begin(kRunnerErrorTypes), std::end(kRunnerErrorTypes), t) != std::end(kRunnerErrorTypes))
      return t;
  }
  return "exception";
}

// "5" for 5000 ms, "0.5" for 500 ms: seconds as the platform prints them.
std::string seconds(std::chrono::milliseconds ms) {
  std::string out = std::to_string(ms.count() / 1000);
  if (int64_t frac = ms.count() % 1000) {
    std::string digits = std::to_string(1000 + frac).substr(1);
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// The runner's result, validated: user code shares the runner's process and
// can write to fd 3, so nothing is trusted beyond its shape.
bool parse_runner_result(const Result& run, uint64_t result_bytes, ExecOutcome& out) {
  if (run.fd3_data.empty()) return false;
  if (run.fd3_truncated) {
    out.status = "error";
    out.error_type = "serialization";
    out.error = "the return value is larger than the result limit of " + std::to_string(result_bytes >> 20) +
                " MiB once encoded as JSON";
    return true;
  }
  if (json_nesting_depth(run.fd3_data) > kMaxJsonDepth) {
    out.status = "error";
    out.error_type = "serialization";
    out.error = "the return value is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return true;
  }
  if (json_value_count(run.fd3_data) > kMaxJsonValues) {
    out.status = "error";
    out.error_type = "serialization";
    out.error = "the return value holds more than " + std::to_string(kMaxJsonValues) +
                " values (array elements and object members)";
    return true;
  }
  if (const auto integer = json_integer_beyond_64_bits(run.fd3_data)) {
    out.status = "error";
    out.error_type = "serialization";
    out.error =
        "the return value holds the integer " + *integer + ", which " + kBeyond64Bits + ": return it as a string";
    return true;
  }
  auto j = nlohmann::ordered_json::parse(run.fd3_data, nullptr, false);
  // Lone surrogates have no UTF-8 form: they come back as U+FFFD.
  if (j.is_discarded()) j = nlohmann::ordered_json::parse(replace_lone_surrogate_escapes(run.fd3_data), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.size() != std::size(kResultKeys)) return false;
  for (const char* key : kResultKeys)
    if (!j.contains(key)) return false;
  if (!j["error"].is_null() && !j["error"].is_string()) return false;
  if (!j["error_type"].is_null() && !j["error_type"].is_string()) return false;
  if (j["error"].is_null()) {
    out.status = "ok";
    out.return_value = j["return"];
  } else {
    out.status = "error";
    out.error = j["error"].get<std::string>();
    out.error_type = runner_error_type(j["error_type"]);
  }
  return true;
}

void describe_failure(const RunSpec& spec, const Result& run, ExecOutcome& out) {
  out.return_value = nullptr;
  switch (run.status) {
    case RunStatus::kTimeout: {
      bool cpu = std::find(run.limits_hit.begin(), run.limits_hit.end(), "cpu_time") != run.limits_hit.end();
      out.status = "timeout";
      out.error_type = "timeout";
      out.error = cpu ? "Execution exceeded its CPU time (> " + seconds(spec.limits.cpu_time) + " seconds)."
                      : "Execution timed out (> " + seconds(spec.limits.wall_time) + " seconds).";
      return;
    }
    case RunStatus::kOom:
      out.status = "oom";
      out.error_type = "oom";
      out.error =
          "Execution ran out of memory (" +
          (run.error.empty() ? "limit " + std::to_string(spec.limits.cgroup.memory_bytes >> 20) + " MiB" : run.error) +
          ")";
      return;
    case RunStatus::kKilled:
      out.status = "killed";
      out.error_type = "killed";
      // The supervisor's reason when it gave one (a foreign ABI call, a CPU
      // counter that could no longer be read). A SIGSYS without one is the
      // filter's only where it kills in the kernel; else the code sent it.
      out.error = "Execution was killed by " + signal_name(run.signal.value_or(SIGKILL)) +
                  (!run.error.empty() ? " (" + run.error + ")"
                   : run.signal == SIGSYS && spec.seccomp.kind == SeccompChoice::kAllowList &&
                           !allow_list_notifies(spec.seccomp.allow)
                       ? " (a forbidden system call)"
                       : "");
      return;
    case RunStatus::kSetupError:
      out.status = "error";
      out.error_type = "sandbox";
      out.error = "The sandbox could not be started: " + run.error;
      return;
    case RunStatus::kOk:
    case RunStatus::kExitNonzero:
      out.status = "error";
      out.error_type = "runner";
      // fd 3 is the runner's, but the code shares its process: bytes there
      // that are not one result mean the code wrote to it too.
      out.error = run.fd3_data.empty()
                      ? "The code exited (status " + std::to_string(run.exit_code) + ") without returning a result"
                      : "The code exited (status " + std::to_string(run.exit_code) +
                            ") and what reached the result channel (fd 3) was not one result: the code may have "
                            "written to fd 3";
      return;
  }
}

}  // namespace

std::optional<Language> parse_language(const std::string& name) {
  if (name == "python") return Language::kPython;
  if (name == "javascript" || name == "node" || name == "js") return Language::kJavaScript;
  return std::nullopt;
}

const char* to_string(Language language) { return language == Language::kPython ? "python" : "javascript"; }

bool forks(const Profile& profile, Language language) {
  return language == Language::kPython ? profile.fork_server.python : profile.fork_server.javascript;
}

RunSpec exec_spec(RunSpec base, Language language) {
  base.argv = language == Language::kPython ? std::vector<std::string>{"python3", "/opt/nsbox/runner.py"}
                                            : std::vector<std::string>{"node", "/opt/nsbox/runner.js"};
  base.stdio = StdioMode::kCapture;
  base.capture_fd3 = true;
  base.stdin_data = "";  // the request, written when the run starts
  return base;
}

namespace {

std::string request_text(const ExecRequest& request) {
  return nlohmann::ordered_json{{"code", request.code}, {"inputs", request.inputs}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Nothing to run: answered before any sandbox runs, as the platform does.
std::optional<ExecOutcome> answer_without_code(const ExecRequest& request) {
  if (request.code.find_first_not_of(" \t\r\n") != std::string::npos) return std::nullopt;
  ExecOutcome out;
  out.status = "error";
  out.error_type = "contract";
  out.error = "No code provided.";
  out.run.status = RunStatus::kOk;
  return out;
}

}  // namespace

ExecOutcome outcome_of(const RunSpec& spec, Result run) {
  ExecOutcome out;
  out.run = std::move(run);
  // A result counts only when the runner also finished normally: a workload
  // killed after writing one still ran out of time or memory.
  const bool finished = out.run.status == RunStatus::kOk;
  if (!(finished && parse_runner_result(out.run, spec.result_bytes, out))) describe_failure(spec, out.run, out);
  return out;
}

ExecOutcome run_exec(const Launcher& launcher, RunSpec base, const ExecRequest& request, int cancel_fd,
                     const EgressJournal& journal) {
  if (auto answer = answer_without_code(request)) return *answer;
  RunSpec spec = exec_spec(std::move(base), request.language);
  spec.stdin_data = request_text(request);
  return outcome_of(spec, launcher.run(spec, cancel_fd, journal));
}

ExecOutcome finish_exec(PreparedRun& prepared, const RunSpec& spec, const ExecRequest& request, int cancel_fd,
                        const EgressJournal& journal) {
  if (auto answer = answer_without_code(request)) return *answer;
  if (journal) prepared.journal_egress(journal);
  return outcome_of(spec, prepared.finish(request_text(request), spec.limits.wall_time, cancel_fd));
}

nlohmann::ordered_json to_json(const ExecOutcome& o) {
  using json = nlohmann::ordered_json;
  json j;
  j["return"] = o.return_value;
  j["error"] = o.error ? json(*o.error) : json(nullptr);
  j["status"] = o.status;
  j["error_type"] = o.error_type.empty() ? json(nullptr) : json(o.error_type);
  j["stdout"] = o.run.stdout_data;
  j["stderr"] = o.run.stderr_data;
  j["stdout_truncated"] = o.run.stdout_truncated;
  j["stderr_truncated"] = o.run.stderr_truncated;
  j["usage"] = {{"wall_ms", o.run.wall_ms},
                {"cpu_ms", o.run.cpu_ms},
                {"peak_memory_bytes", o.run.peak_memory_bytes >= 0 ? json(o.run.peak_memory_bytes) : json(nullptr)}};
  j["limits_hit"] = o.run.limits_hit;
  j["warnings"] = o.run.warnings;
  j["denied_syscalls"] = json::object();
  for (const auto& [name, count] : o.run.denied_syscalls) j["denied_syscalls"][name] = count;
  j["network"] = o.run.network ? to_json(*o.run.network) : json(nullptr);
  return j;
}

}  // namespace nsbox
