// The agent contract: code that defines `class Args` and `main(args)`, plus an
// inputs object, run by the language runner in the rootfs (/opt/nsbox/runner.*,
// protocol in docs/RUNNERS.md) inside a sandbox.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "nsbox/profile.h"
#include "nsbox/result.h"
#include "nsbox/run_spec.h"
#include "nsbox/sandbox.h"

namespace nsbox {

enum class Language { kPython, kJavaScript };

// "python"; "javascript", "node", "js". Empty optional for anything else.
std::optional<Language> parse_language(const std::string& name);
const char* to_string(Language language);

// Whether profile has the node fork its warm runs of language.
bool forks(const Profile& profile, Language language);

struct ExecRequest {
  Language language = Language::kPython;
  std::string code;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
};

// The outcome in the platform's shape plus nsbox's details.
struct ExecOutcome {
  nlohmann::ordered_json return_value;  // null unless status is ok
  std::optional<std::string> error;     // the platform's "error"
  std::string error_type;  // runner's: syntax|exception|serialization|contract, or ours: timeout|oom|killed|runner
  std::string status;      // ok | error | timeout | oom | killed
  Result run;              // stdout, stderr, usage, limits hit, warnings
};

// Runs the request in a sandbox built from base (rootfs, limits, env,
// mounts), which this function completes with the runner's argv, stdin and
// result channel. Never throws for the user's code's failures; a sandbox
// that could not be built comes back with run.status == setup_error.
// journal, if set, is told each egress decision as it is made.
ExecOutcome run_exec(const Launcher& launcher, RunSpec base, const ExecRequest& request, int cancel_fd = -1,
                     const EgressJournal& journal = {});

// The spec that runs language's runner on base, with the request to come on
// its stdin: what a warm sandbox is prepared from (Launcher::prepare).
RunSpec exec_spec(RunSpec base, Language language);

// Runs request in a sandbox prepared from spec = exec_spec(...), whose
// wall_time applies from now. The prepared sandbox is used up. journal as
// for run_exec.
ExecOutcome finish_exec(PreparedRun& prepared, const RunSpec& spec, const ExecRequest& request, int cancel_fd = -1,
                        const EgressJournal& journal = {});

// What a run of spec's runner comes to: the runner's result when it wrote one
// and ended normally, else the status and an error that says why not.
ExecOutcome outcome_of(const RunSpec& spec, Result run);

// {"return", "error", "status", "stdout", "stderr", "usage": {...}, ...}
nlohmann::ordered_json to_json(const ExecOutcome& outcome);

}  // namespace nsbox
