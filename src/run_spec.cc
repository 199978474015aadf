#include "nsbox/run_spec.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "nsbox/error.h"

namespace nsbox {

std::vector<std::pair<std::string, std::string>> default_environment() {
  return {
      {"PATH", "/usr/local/bin:/usr/bin:/bin"},
      {"HOME", "/tmp"},
      {"TMPDIR", "/tmp"},
      {"LANG", "C.UTF-8"},
      {"USER", "sandbox"},
      {"LOGNAME", "sandbox"},
      {"SHELL", "/bin/sh"},
  };
}

bool is_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string env_name_refusal(std::string_view name) {
  static const std::array<std::pair<std::string_view, std::string_view>, 3> kRefused{{
      {"LD_PRELOAD", "it would load a library into every program of the sandbox"},
      {"LD_LIBRARY_PATH", "it would change which libraries every program of the sandbox loads"},
      {"LD_AUDIT", "it would load an auditing library into every program of the sandbox"},
  }};
  for (const auto& [refused, why] : kRefused)
    if (name == refused)
      return "not allowed: " + std::string(why) +
             ", the language runners included; put libraries into the rootfs instead";
  return "";
}

std::pair<std::string, std::string> parse_env_assignment(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError("--env expects KEY=VALUE, got '" + text + "'");
  if (text.find('\0') != std::string::npos) throw UsageError("--env value contains a NUL byte");
  std::string name = text.substr(0, eq);
  if (!is_env_name(name))
    throw UsageError("--env: \"" + name + "\" is not a valid variable name: expected [A-Za-z_][A-Za-z0-9_]*");
  if (const std::string why = env_name_refusal(name); !why.empty()) throw UsageError("--env " + name + ": " + why);
  if (text.size() + 1 > kMaxEnvEntry)
    throw UsageError("--env " + name + ": " + std::to_string(text.size() + 1) +
                     " bytes with its name; the kernel passes at most 128 KiB per variable");
  return {std::move(name), text.substr(eq + 1)};
}

void set_env(std::vector<std::pair<std::string, std::string>>& env, std::string key, std::string value) {
  auto it = std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == key; });
  if (it != env.end()) {
    it->second = std::move(value);
  } else {
    env.emplace_back(std::move(key), std::move(value));
  }
}

void validate(const RunSpec& spec) {
  if (spec.argv.empty()) throw UsageError("no command given (expected: nsbox run -- CMD ARGS...)");
  if (spec.argv[0].empty()) throw UsageError("the command name is empty");
  if (spec.rootfs.empty() || spec.rootfs[0] != '/')
    throw UsageError("rootfs must be an absolute path, got '" + spec.rootfs + "'");
  if (spec.cwd.empty() || spec.cwd[0] != '/')
    throw UsageError("cwd must be an absolute path inside the sandbox, got '" + spec.cwd + "'");
  if (spec.limits.wall_time.count() < 0) throw UsageError("timeout must not be negative");
  if (spec.limits.tmpfs_bytes < 4096) throw UsageError("tmpfs size must be at least 4KiB");
  if (spec.limits.open_files < 16) throw UsageError("open_files must be at least 16");
  for (const auto& arg : spec.argv)
    if (arg.find('\0') != std::string::npos) throw UsageError("an argument contains a NUL byte");
}

}  // namespace nsbox
