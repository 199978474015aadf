#include "nsbox/cli.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "nsbox/doctor.h"
#include "nsbox/error.h"
#include "nsbox/sandbox.h"
#include "nsbox/unique_fd.h"
#include "nsbox/units.h"

namespace nsbox {
namespace {

constexpr int kUsageExit = 2;

struct RunOptions {
  std::string rootfs = NSBOX_DEFAULT_ROOTFS;
  double timeout_sec = 0;
  bool json = false;
  std::vector<std::string> env;
  std::string cwd = "/tmp";
  std::string memory;    // a size, e.g. 256MiB
  std::string cpu_time;  // a duration, e.g. 10s
  uint64_t pids = 0;
  double cpus = 0;
  bool best_effort = false;
  std::vector<std::string> command;
};

template <typename T, typename Parse>
T parse_flag(const std::string& flag, const std::string& value, Parse parse) {
  try {
    return parse(value);
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag + ": " + e.what());
  }
}

// SIGINT/SIGTERM/SIGHUP/SIGQUIT become readable on an fd the supervisor polls,
// so a signal tears the sandbox down instead of killing nsbox mid-run.
UniqueFd block_termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) throw SysError("sigprocmask", "", errno);
  UniqueFd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd) throw SysError("signalfd", "", errno);
  return fd;
}

RunSpec spec_from_options(const RunOptions& opt) {
  RunSpec spec;
  spec.rootfs = opt.rootfs;
  spec.argv = opt.command;
  spec.cwd = opt.cwd;
  spec.env = default_environment();
  for (const auto& assignment : opt.env) {
    auto [key, value] = parse_env_assignment(assignment);
    set_env(spec.env, std::move(key), std::move(value));
  }
  if (opt.timeout_sec < 0 || !std::isfinite(opt.timeout_sec))
    throw UsageError("--timeout must be a positive number of seconds");
  spec.limits.wall_time = std::chrono::milliseconds(static_cast<int64_t>(std::llround(opt.timeout_sec * 1000)));
  if (opt.timeout_sec > 0 && spec.limits.wall_time.count() == 0) spec.limits.wall_time = std::chrono::milliseconds(1);
  spec.stdio = opt.json ? StdioMode::kCapture : StdioMode::kInherit;
  if (!opt.memory.empty())
    spec.limits.cgroup.memory_bytes = parse_flag<uint64_t>("--memory", opt.memory, parse_size);
  if (!opt.cpu_time.empty())
    spec.limits.cpu_time = parse_flag<std::chrono::milliseconds>("--cpu-time", opt.cpu_time, parse_duration);
  spec.limits.cgroup.pids = opt.pids;
  spec.limits.cgroup.cpus = opt.cpus;
  spec.limits.best_effort = opt.best_effort;
  return spec;
}

int run_command(const RunOptions& opt) {
  RunSpec spec = spec_from_options(opt);
  UniqueFd cancel = block_termination_signals();
  Launcher launcher;
  Result result = launcher.run(spec, cancel.get());
  if (opt.json) {
    std::cout << to_json(result).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
              << std::endl;
  } else if (result.status == RunStatus::kSetupError) {
    std::cerr << "nsbox: " << result.error << std::endl;
  } else {
    for (const auto& w : result.warnings) std::cerr << "nsbox: warning: " << w << std::endl;
    if (result.status == RunStatus::kTimeout) {
      bool cpu = std::find(result.limits_hit.begin(), result.limits_hit.end(), "cpu_time") != result.limits_hit.end();
      std::cerr << "nsbox: " << (cpu ? "CPU time limit reached" : "timed out after " + std::to_string(opt.timeout_sec) + "s")
                << "; sandbox killed" << std::endl;
    } else if (result.status == RunStatus::kOom) {
      std::cerr << "nsbox: out of memory; sandbox killed" << std::endl;
    }
  }
  return result.exit_code;
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"nsbox: run untrusted code in a fresh Linux sandbox"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nsbox ") + NSBOX_VERSION);

  RunOptions run_opt;
  auto* run = app.add_subcommand("run", "Run CMD in a new sandbox and exit with its exit code");
  run->add_option("--rootfs", run_opt.rootfs, "Root tree of the sandbox")->capture_default_str();
  run->add_option("--timeout", run_opt.timeout_sec, "Wall-clock limit in seconds (0: none)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--json", run_opt.json, "Capture output and print a JSON Result");
  run->add_option("--env", run_opt.env, "Set KEY=VALUE in the sandbox's environment (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--cwd", run_opt.cwd, "Working directory inside the sandbox")->capture_default_str();
  run->add_option("--memory", run_opt.memory, "Memory limit of the whole run, e.g. 256MiB (cgroup)");
  run->add_option("--pids", run_opt.pids, "Maximum number of processes and threads (cgroup)");
  run->add_option("--cpus", run_opt.cpus, "CPU bandwidth in CPUs, e.g. 0.5 (cgroup)")
      ->check(CLI::PositiveNumber);
  run->add_option("--cpu-time", run_opt.cpu_time, "CPU time of the whole run, e.g. 10s");
  run->add_flag("--best-effort", run_opt.best_effort,
                "Run even where the host cannot enforce a limit (rlimits stand in; warnings say what is lost)");
  run->add_option("command", run_opt.command, "CMD ARGS... (after --)")->required();
  run->prefix_command();

  std::string doctor_rootfs = NSBOX_DEFAULT_ROOTFS;
  auto* doctor = app.add_subcommand("doctor", "Report what this host supports");
  doctor->add_option("--rootfs", doctor_rootfs, "Root tree to check")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageExit;
  }

  try {
    if (*run) {
      const std::vector<std::string> rest = run->remaining();
      run_opt.command.insert(run_opt.command.end(), rest.begin(), rest.end());
      return run_command(run_opt);
    }
    if (*doctor) return run_doctor(doctor_rootfs, std::cout);
  } catch (const UsageError& e) {
    std::cerr << "nsbox: " << e.what() << std::endl;
    return kUsageExit;
  } catch (const SysError& e) {
    std::cerr << "nsbox: " << e.what() << std::endl;
    return 125;
  }
  return kUsageExit;
}

}  // namespace nsbox
