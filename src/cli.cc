#include "nsbox/cli.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "nsbox/api.h"
#include "nsbox/cgroup.h"
#include "nsbox/check.h"
#include "nsbox/doctor.h"
#include "nsbox/error.h"
#include "nsbox/profile_apply.h"
#include "nsbox/profile_loader.h"
#include "nsbox/runtime.h"
#include "nsbox/sandbox.h"
#include "nsbox/stdio_relay.h"
#include "nsbox/terminal_modes.h"
#include "nsbox/unique_fd.h"
#include "nsbox/units.h"

namespace nsbox {

const CLI::Validator kNonEmpty(
    [](std::string& value) { return value.empty() ? std::string("an empty value is not allowed") : std::string(); }, "",
    "non-empty");
namespace {

constexpr int kUsageExit = 2;

// Options every sandboxed command takes: the profile and what a run may
// tighten, plus the operator's own choices (rootfs, best-effort).
struct SandboxOptions {
  std::string profile = "default";
  std::string rootfs;      // overrides the profile's
  double timeout_sec = 0;  // 0: the profile's wall_time
  std::string memory;      // a size, e.g. 256MiB
  std::string cpu_time;    // a duration, e.g. 10s
  uint64_t pids = 0;
  double cpus = 0;
  bool best_effort = false;
  std::vector<std::string> env;
  std::string cwd = "/tmp";
  std::vector<std::string> inputs;  // FILE[:NAME] copied into the workspace
  std::string artifacts_dir;
  std::string cgroup_parent;  // cgroup v2 directory for run cgroups
};

struct RunOptions {
  SandboxOptions sandbox;
  bool json = false;
  std::vector<std::string> command;
};

struct ExecOptions {
  SandboxOptions sandbox;
  std::string language;
  std::string code_file;
  std::string inputs = "{}";
  std::string inputs_file;
};

template <typename T, typename Parse>
T parse_flag(const std::string& flag, const std::string& value, Parse parse) {
  try {
    return parse(value);
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag + ": " + e.what());
  }
}

constexpr double kSecondsInAYear = 365.0 * 24 * 3600;
constexpr double kMaxCpusFlag = 4096;

// A number of seconds or CPUs in plain decimals (as profiles write them:
// not 0x10, 1e3 or inf), more than 0 and at most max, in the flag's words.
CLI::Validator positive_number(const std::string& what, double max) {
  return CLI::Validator(
      [what, max](std::string& value) {
        const bool decimal =
            std::any_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
            std::all_of(value.begin(), value.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
            std::count(value.begin(), value.end(), '.') <= 1;
        const double v = decimal ? std::strtod(value.c_str(), nullptr) : 0;
        if (!decimal || v <= 0 || v > max)
          return "expected " + what + " more than 0 and at most " + std::to_string(std::llround(max)) +
                 ", in decimals, got '" + value + "'";
        return std::string();
      },
      "", "positive");
}

// A whole number in min..max.
CLI::Validator whole_number(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& value) {
        const bool digits = !value.empty() && value.size() <= 19 &&
                            std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || std::stoull(value) < min || std::stoull(value) > max)
          return "expected a whole number in " + std::to_string(min) + ".." + std::to_string(max) + ", got '" + value +
                 "'";
        return std::string();
      },
      "", "whole");
}

void add_sandbox_options(CLI::App* cmd, SandboxOptions& o) {
  cmd->add_option("--profile", o.profile, "Profile name (looked up in the profile path) or YAML file")
      ->capture_default_str()
      ->check(kNonEmpty);
  cmd->add_option("--rootfs", o.rootfs, "Root tree of the sandbox (default: the profile's)")->check(kNonEmpty);
  cmd->add_option("--timeout", o.timeout_sec, "Wall-clock limit in seconds, at most the profile's")
      ->check(positive_number("a number of seconds", kSecondsInAYear));
  cmd->add_option("--memory", o.memory, "Memory limit of the whole run, e.g. 256MiB, at most the profile's")
      ->check(kNonEmpty);
  cmd->add_option("--pids", o.pids, "Maximum number of processes and threads, at most the profile's")
      ->check(whole_number(kMinPids, 65536));
  cmd->add_option("--cpus", o.cpus, "CPU bandwidth in CPUs, e.g. 0.5, at most the profile's")
      ->check(positive_number("a number of CPUs", kMaxCpusFlag));
  cmd->add_option("--cpu-time", o.cpu_time, "CPU time of the whole run, e.g. 10s, at most the profile's")
      ->check(kNonEmpty);
  cmd->add_flag("--best-effort", o.best_effort,
                "Run even where the host cannot enforce a limit (rlimits stand in; warnings say what is lost)");
  cmd->add_option("--env", o.env, "Set KEY=VALUE in the sandbox's environment (repeatable)")->allow_extra_args(false);
  cmd->add_option("--cwd", o.cwd, "Working directory inside the sandbox")->capture_default_str()->check(kNonEmpty);
  cmd->add_option("--input", o.inputs, "Copy FILE[:NAME] into the workspace (repeatable)")->allow_extra_args(false);
  cmd->add_option("--artifacts", o.artifacts_dir, "Copy the files the run leaves in <workspace>/out here")
      ->check(kNonEmpty);
  cmd->add_option("--cgroup-parent", o.cgroup_parent,
                  "cgroup v2 directory to create run cgroups in (default: nsbox's own cgroup), "
                  "e.g. a systemd slice with Delegate=yes")
      ->check(kNonEmpty);
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

std::string executable_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

Profile load_profile_or_explain(const std::string& name) {
  try {
    return load_profile(name, default_profile_search(executable_dir()));
  } catch (const ProfileError& e) {
    throw UsageError(std::string("profile ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--profile: ") + e.what());
  }
}

// The node `nsbox serve --config FILE` would run (FILE empty: the built-in
// one); a config that does not load is a bad command line.
NodeConfig load_node_config_or_explain(const std::string& file) {
  const ProfileSearch search = default_profile_search(executable_dir());
  try {
    return file.empty() ? builtin_node_config(search) : load_node_config(file, search);
  } catch (const ProfileError& e) {
    throw UsageError((file.empty() ? std::string("the built-in node's default profile: ") : std::string("--config: ")) +
                     e.what());
  }
}

// Made now as the copy after the run would make it: a directory that cannot
// be there is a bad command line, found before the workload runs.
void check_artifacts_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw UsageError("--artifacts " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw UsageError("--artifacts " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw UsageError("--artifacts " + dir + ": " + std::strerror(ENOTDIR));
}

// An --input is checked before the run, as the workspace would find it: a
// file that cannot be copied, or a name taken, is a bad command line.
void check_input(const std::string& file, const std::string& name,
                 const std::vector<std::pair<std::string, std::string>>& earlier) {
  check_input_name(name);
  if (name == "out") throw UsageError("--input " + file + ": the name 'out' is the workspace's artifact directory");
  for (const auto& [other_file, other_name] : earlier)
    if (other_name == name)
      throw UsageError("--input " + file + ": the name '" + name + "' is already taken by " + other_file);
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw UsageError("--input " + file + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw UsageError("--input " + file + ": not a regular file");
  if (::access(file.c_str(), R_OK) != 0) throw UsageError("--input " + file + ": " + std::strerror(errno));
}

// The profile's spec with the flags applied; flags may only tighten limits.
RunSpec spec_from_options(const SandboxOptions& opt) {
  const Profile profile = load_profile_or_explain(opt.profile);
  RunSpec spec = spec_from_profile(profile);
  if (!opt.rootfs.empty()) spec.rootfs = opt.rootfs;
  spec.cwd = opt.cwd;
  for (const auto& assignment : opt.env) {
    auto [key, value] = parse_env_assignment(assignment);
    set_env(spec.env, std::move(key), std::move(value));
  }
  RunOverrides overrides;
  if (opt.timeout_sec > 0) {  // the validator took decimals in (0, a year] only
    overrides.wall_time = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(opt.timeout_sec * 1000)));
  }
  if (!opt.memory.empty()) overrides.memory = parse_flag<uint64_t>("--memory", opt.memory, parse_size);
  if (!opt.cpu_time.empty())
    overrides.cpu_time = parse_flag<std::chrono::milliseconds>("--cpu-time", opt.cpu_time, parse_duration);
  if (opt.pids) overrides.pids = opt.pids;
  if (opt.cpus > 0) overrides.cpus = opt.cpus;
  apply_overrides(profile, overrides, spec);
  if ((!opt.inputs.empty() || !opt.artifacts_dir.empty()) && !spec.workspace)
    throw UsageError("--input/--artifacts need a workspace, and profile " + profile.name + " has none");
  for (const auto& item : opt.inputs) {
    auto colon = item.rfind(':');
    std::string file = colon == std::string::npos ? item : item.substr(0, colon);
    std::string name = colon == std::string::npos ? file.substr(file.rfind('/') + 1) : item.substr(colon + 1);
    check_input(file, name, spec.workspace->inputs);
    spec.workspace->inputs.emplace_back(file, name);
  }
  if (spec.workspace) spec.workspace->artifacts_dir = opt.artifacts_dir;
  if (!opt.artifacts_dir.empty()) check_artifacts_dir(opt.artifacts_dir);
  if (opt.best_effort) spec.limits.best_effort = true;
  return spec;
}

// A cgroup parent applies to cgroup v2 only: on a host whose runs go to v1
// hierarchies it would be ignored, and the runs would escape the slice the
// operator named. Refused instead, as is a parent that is not there.
void check_cgroup_parent(const RunSpec& spec, const std::string& parent) {
  if (parent.empty()) return;
  if (std::string problem = cgroup_parent_problem(parent, spec.limits.cgroup); !problem.empty())
    throw UsageError("--cgroup-parent " + problem);
}

// When nsbox stops waiting for a reader of its output that takes no more
// (a socket's peer, a FIFO's reader that stopped reading): readable on a
// termination signal, at the run's time limit counted from its start, or
// at once after a run that a limit ended. Had the run held the caller's
// stream itself, it would have been killed at its limit while blocked.
class OutputDeadline {
 public:
  OutputDeadline(int cancel_fd, std::chrono::nanoseconds wall_time)
      : either_(::epoll_create1(EPOLL_CLOEXEC)), timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC)) {
    if (!either_ || !timer_) throw SysError("epoll/timerfd", "output deadline", errno);
    arm(wall_time);
    for (int fd : {cancel_fd, timer_.get()}) {
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.fd = fd;
      if (::epoll_ctl(either_.get(), EPOLL_CTL_ADD, fd, &e) != 0) throw SysError("epoll_ctl", "output deadline", errno);
    }
  }
  void now() { arm(std::chrono::nanoseconds(1)); }
  int fd() const { return either_.get(); }

 private:
  void arm(std::chrono::nanoseconds after) {
    itimerspec at{};
    at.it_value.tv_sec = static_cast<time_t>(after.count() / 1000000000);
    at.it_value.tv_nsec = static_cast<long>(after.count() % 1000000000);
    if (::timerfd_settime(timer_.get(), 0, &at, nullptr) != 0)
      throw SysError("timerfd_settime", "output deadline", errno);
  }

  UniqueFd either_, timer_;
};

int run_command(const RunOptions& opt) {
  RunSpec spec = spec_from_options(opt.sandbox);
  spec.argv = opt.command;
  spec.stdio = opt.json ? StdioMode::kCapture : StdioMode::kInherit;
  UniqueFd cancel = block_termination_signals();
  Launcher launcher(LauncherOptions{.cgroup_parent = opt.sandbox.cgroup_parent, .cgroup_host = std::nullopt});
  check_cgroup_parent(spec, opt.sandbox.cgroup_parent);
  // A stopped nsbox could not end the run at its time limit, and the run,
  // a session of its own, is not stopped with it: Ctrl-Z is ignored, and a
  // terminal read from the background ends the run's input (EIO).
  for (int sig : {SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(sig, SIG_IGN);
  std::optional<TerminalModes> terminal;
  std::optional<StdioRelay> relay;
  std::optional<OutputDeadline> deadline;
  if (!opt.json) {
    terminal.emplace();  // before the relay swaps any of the caller's descriptors
    relay.emplace(spec.limits.file_size);
    deadline.emplace(cancel.get(), spec.limits.wall_time);
  }
  Result result = launcher.run(spec, cancel.get());
  if (relay) {
    if (result.status != RunStatus::kOk && result.status != RunStatus::kExitNonzero) deadline->now();
    for (auto& problem : relay->finish(deadline->fd())) result.warnings.push_back(std::move(problem));
    terminal->restore();
  }
  if (opt.json) {
    std::cout << to_json(result).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    return result.exit_code;
  }
  for (const auto& w : result.warnings) std::cerr << "nsbox: warning: " << w << std::endl;
  if (result.status == RunStatus::kSetupError) {
    std::cerr << "nsbox: " << result.error << std::endl;
  } else if (result.status == RunStatus::kTimeout) {
    const bool cpu =
        std::find(result.limits_hit.begin(), result.limits_hit.end(), "cpu_time") != result.limits_hit.end();
    std::cerr << "nsbox: "
              << (cpu ? "CPU time limit of " + format_duration(spec.limits.cpu_time)
                      : "time limit of " + format_duration(spec.limits.wall_time))
              << " reached; sandbox killed" << std::endl;
  } else if (result.status == RunStatus::kOom) {
    std::cerr << "nsbox: "
              << (result.error.empty() ? "memory limit of " + format_size(spec.limits.cgroup.memory_bytes) + " reached"
                                       : result.error)
              << "; sandbox killed" << std::endl;
  }
  return result.exit_code;
}

// What exec reads for --code and --inputs-file: /dev/zero or an endless
// pipe would otherwise fill the memory.
constexpr size_t kMaxExecInput = 64ull << 20;

std::string read_all(std::istream& in, const std::string& flag, const std::string& path) {
  std::string out;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > kMaxExecInput)
      throw UsageError(flag + ": " + (path == "-" ? "standard input" : path) + " holds more than " +
                       format_size(kMaxExecInput));
  }
  return out;
}

std::string read_input_file(const std::string& flag, const std::string& path) {
  if (path == "-") return read_all(std::cin, flag, path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // it would open, and read as empty
    throw UsageError(flag + ": cannot read " + path + ": " + std::strerror(EISDIR));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read " + path + ": " + std::strerror(errno));
  return read_all(in, flag, path);
}

int exec_command(const ExecOptions& opt) {
  ExecRequest request;
  auto language = parse_language(opt.language);
  if (!language) throw UsageError("--lang: unsupported language '" + opt.language + "' (python, javascript, node, js)");
  request.language = *language;
  request.code = read_input_file("--code", opt.code_file);
  const std::string inputs_flag = opt.inputs_file.empty() ? "--inputs" : "--inputs-file " + opt.inputs_file;
  const std::string inputs_text =
      opt.inputs_file.empty() ? opt.inputs : read_input_file("--inputs-file", opt.inputs_file);
  // Held to the node's rules for request bodies.
  ParsedJson parsed = parse_untrusted_json(inputs_text);
  if (!parsed.error.empty()) throw UsageError(inputs_flag + ": " + parsed.error);
  request.inputs = std::move(parsed.value);
  if (!request.inputs.is_object()) throw UsageError(inputs_flag + ": must be a JSON object");
  RunSpec spec = spec_from_options(opt.sandbox);
  UniqueFd cancel = block_termination_signals();
  Launcher launcher(LauncherOptions{.cgroup_parent = opt.sandbox.cgroup_parent, .cgroup_host = std::nullopt});
  check_cgroup_parent(spec, opt.sandbox.cgroup_parent);
  ExecOutcome outcome = run_exec(launcher, spec, request, cancel.get());
  std::cout << to_json(outcome).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
  return outcome.run.status == RunStatus::kSetupError ? 125 : 0;
}

// `nsbox serve ...` is nsbox-serve: next to this binary (the build tree),
// else in the installed libexec directory.
[[noreturn]] void exec_serve(int argc, char** argv) {
  std::vector<std::string> candidates = {executable_dir() + "/nsbox-serve",
                                         std::string(NSBOX_LIBEXECDIR) + "/nsbox-serve"};
  std::vector<char*> args = {const_cast<char*>("nsbox serve")};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  int err = ENOENT;
  for (const auto& path : candidates) {
    ::execv(path.c_str(), args.data());
    if (errno != ENOENT) err = errno;
  }
  std::cerr << "nsbox: serve: cannot start nsbox-serve (looked in " << candidates[0] << " and " << candidates[1]
            << "): " << std::strerror(err) << std::endl;
  std::exit(126);
}

// For `nsbox run`: what follows its first "--", if there is one.
std::optional<std::vector<std::string>> command_after_separator(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "run") return std::nullopt;
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--") return std::vector<std::string>(argv + i + 1, argv + argc);
  return std::nullopt;
}

// The command of `nsbox run`. What CLI11 did not take as an option before
// "--" is a mistyped option or a stray word, never part of the command:
// `--memroy 16MiB` must not run unlimited with the flag as an argument.
std::vector<std::string> command_of_run(std::vector<std::string> positional,
                                        const std::optional<std::vector<std::string>>& after_separator) {
  if (after_separator) {
    if (!positional.empty()) {
      std::string words;
      for (const auto& w : positional) words += (words.empty() ? "" : " ") + w;
      throw UsageError("unknown option or argument before --: " + words + " (see nsbox run --help)");
    }
    positional = *after_separator;
  } else if (!positional.empty() && positional[0].starts_with('-')) {
    throw UsageError("unknown option " + positional[0] + " (see nsbox run --help; the command goes after --)");
  }
  if (positional.empty()) throw UsageError("no command given (expected: nsbox run [OPTIONS] -- CMD [ARGS...])");
  return positional;
}

// CLI11 says only "A subcommand is required" when the first word is none.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return std::nullopt;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown command '" + std::string(argv[1]) + "': the commands are " + names + " (see nsbox --help)";
}

}  // namespace

int cli_main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "serve") exec_serve(argc, argv);
  CLI::App app{"nsbox: run untrusted code in a fresh Linux sandbox"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nsbox ") + NSBOX_VERSION);

  RunOptions run_opt;
  auto* run = app.add_subcommand("run", "Run CMD in a new sandbox and exit with its exit code");
  add_sandbox_options(run, run_opt.sandbox);
  run->add_flag("--json", run_opt.json, "Capture output and print a JSON Result");
  // No positional option: CLI11 would take CMD into it and the arguments
  // that look like options out of order. The first word CLI11 does not
  // know ends the options; command_of_run checks it is not a mistyped one.
  run->prefix_command();
  run->footer("The command: nsbox run [OPTIONS] -- CMD [ARGS...]\n");

  ExecOptions exec_opt;
  auto* exec = app.add_subcommand("exec", "Run agent code (class Args, main(args)) and print its result as JSON");
  add_sandbox_options(exec, exec_opt.sandbox);
  exec->add_option("--lang", exec_opt.language, "python or javascript (node, js)")->required();
  exec->add_option("--code", exec_opt.code_file, "File with the code, or - for stdin")->required();
  auto* inputs_opt = exec->add_option("--inputs", exec_opt.inputs, "The inputs object as JSON");
  exec->add_option("--inputs-file", exec_opt.inputs_file, "File with the inputs object")->excludes(inputs_opt);

  std::vector<std::string> check_files;
  std::string check_from;
  auto* check = app.add_subcommand("check", "Validate profiles and print them resolved");
  check->add_option("--from", check_from, "Source format: openjiuwen (the platform's sandbox_config.yaml)")
      ->check(CLI::IsMember({"openjiuwen"}));
  check->add_option("files", check_files, "Profile files")->required();

  // Listed for --help; `nsbox serve` never reaches the parser (exec_serve).
  app.add_subcommand("serve", "Start the HTTP node (see nsbox serve --help)")->allow_extras();

  std::string doctor_rootfs = NSBOX_DEFAULT_ROOTFS;
  std::vector<std::string> doctor_profiles;
  auto* doctor = app.add_subcommand("doctor", "Report what this host supports");
  doctor->add_option("--rootfs", doctor_rootfs, "Root tree to check")->capture_default_str();
  doctor->add_option("--profile", doctor_profiles,
                     "Also report what this profile (NAME or FILE; repeatable) would lose here");
  std::string doctor_config;
  doctor
      ->add_option("--config", doctor_config,
                   "Node config (as nsbox serve's): check its tenants' profiles and size the host's quotas "
                   "for its max_concurrent")
      ->check(kNonEmpty);

  // `nsbox run [OPTIONS] -- CMD...`: the command is all after the first
  // "--", set apart before CLI11 parses the options.
  const std::optional<std::vector<std::string>> after_separator = command_after_separator(argc, argv);
  const int option_argc = after_separator ? argc - static_cast<int>(after_separator->size()) - 1 : argc;
  try {
    app.parse(option_argc, argv);
  } catch (const CLI::ParseError& e) {
    if (auto why = unknown_command(app, argc, argv)) {
      std::cerr << "nsbox: " << *why << std::endl;
      return kUsageExit;
    }
    return app.exit(e) == 0 ? 0 : kUsageExit;
  }

  try {
    if (*run) {
      run_opt.command = command_of_run(run->remaining(), after_separator);
      return run_command(run_opt);
    }
    if (*exec) return exec_command(exec_opt);
    if (*check)
      return run_check(check_files, !check_from.empty(), default_profile_search(executable_dir()), std::cout,
                       std::cerr);
    if (*doctor) {
      DoctorOptions options{.rootfs = doctor_rootfs,
                            .default_profile = std::nullopt,
                            .default_profile_error = "",
                            .rootfs_given = doctor->count("--rootfs") > 0,
                            .profiles = {},
                            .node = {},
                            .node_given = !doctor_config.empty()};
      if (options.node_given) {
        options.node = load_node_config_or_explain(doctor_config);
      } else {
        try {  // the built-in node runs the default profile, whose failure is reported below
          options.node = load_node_config_or_explain("");
        } catch (const UsageError&) {
          options.node.max_concurrent = std::max(1u, std::thread::hardware_concurrency());
        }
      }
      for (const auto& name : doctor_profiles) options.profiles.push_back(load_profile_or_explain(name));
      try {  // a default that does not load is a finding of doctor's, not a bad command line
        options.default_profile = load_profile_or_explain("default");
      } catch (const UsageError& e) {
        options.default_profile_error = e.what();
      }
      return run_doctor(options, std::cout);
    }
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
