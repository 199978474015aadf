// RunSpec: everything one sandboxed run needs, resolved and validated before
// any namespace is created. Profiles (and later HTTP requests) produce it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nsbox/cgroup.h"
#include "nsbox/egress_policy.h"
#include "nsbox/workspace.h"

namespace nsbox {

struct Limits {
  std::chrono::milliseconds wall_time{0};  // 0: no deadline
  uint64_t tmpfs_bytes = 64ull << 20;      // size cap of /tmp
  uint64_t stdout_bytes = 1ull << 20;      // capture caps (--json)
  uint64_t stderr_bytes = 1ull << 20;
  uint64_t open_files = 1024;         // RLIMIT_NOFILE
  uint64_t file_size = 256ull << 20;  // RLIMIT_FSIZE
  // Quotas of the run's user namespace (UserNsQuota): inotify instances and
  // watches its processes may hold, out of their maker's.
  uint64_t inotify_instances = 8;
  uint64_t inotify_watches = 8192;
  CgroupLimits cgroup;                    // memory, pids, cpus (cgroup controllers)
  std::chrono::milliseconds cpu_time{0};  // CPU time of the whole run; 0: none
  // Run even when the host cannot enforce a limit, with rlimits standing in
  // where they can and a warning in the Result; otherwise such a run is refused.
  bool best_effort = false;
};

// A host path bound into the sandbox. The source is opened without following
// any symlink; the target is created inside the new root if missing, never
// through a symlink.
struct BindMount {
  std::string source;  // absolute host path
  std::string target;  // absolute path inside the sandbox
  bool read_only = true;
  bool noexec = false;
  // nsbox's own per-run directory (the workspace): mount points for mounts
  // below it may be made in it. In any other source they must exist already.
  bool source_is_the_runs = false;
};

struct TmpfsMount {
  std::string target;  // absolute path inside the sandbox
  uint64_t size_bytes = 0;
};

enum class StdioMode {
  kInherit,  // interactive: the workload gets nsbox's own stdin/stdout/stderr
  kCapture,  // stdin is /dev/null, stdout/stderr captured up to the caps
};

// Which seccomp filter the workload gets.
struct SeccompChoice {
  // kForkServer: the fork server's own filter (SeccompProgram::fork_server_policy).
  enum Kind { kDefault, kStrict, kAllowList, kForkServer } kind = kDefault;
  std::vector<std::string> allow;  // kAllowList: syscall names
};

struct RunSpec {
  std::string rootfs;                                    // host path of the root tree
  std::vector<std::string> argv;                         // argv[0] is searched in PATH inside
  std::vector<std::pair<std::string, std::string>> env;  // the whole environment
  std::string cwd = "/tmp";
  std::string hostname = "sandbox";
  uid_t sandbox_uid = 65534;  // ids inside the sandbox
  gid_t sandbox_gid = 65534;
  Limits limits;
  SeccompChoice seccomp;
  std::vector<BindMount> binds;            // in order; parents before children
  std::vector<TmpfsMount> tmpfs;           // besides /tmp
  std::vector<std::string> masks;          // paths hidden inside, besides the built-in ones
  std::optional<WorkspaceSpec> workspace;  // a per-run read-write directory
  StdioMode stdio = StdioMode::kInherit;
  // kCapture only: bytes fed to the workload's stdin (then EOF) instead of
  // /dev/null, and a pipe at the workload's fd 3 whose content is returned
  // (the agent runners' result channel), capped at result_bytes.
  std::optional<std::string> stdin_data;
  bool capture_fd3 = false;
  uint64_t result_bytes = 16ull << 20;
  // Network egress through nsbox's proxy (egress.h); nullopt: loopback only.
  std::optional<EgressPolicy> egress;
  // The fork server's sandbox (fork_server.h): a socket the workload gets as
  // fd 3 instead of a result pipe (borrowed: the caller closes it), and /proc
  // left unmasked, since each run mounts and masks a /proc of its own.
  int fd3_socket = -1;
  bool mask_proc = true;
  // The fork server's sandbox makes its runs' user namespaces (nested in
  // its own, which must allow them and not cap what they charge through
  // it); each run's PID 1 bounds its own. So this one gets neither the user
  // namespace quotas nor the charged rlimits (rlimits.h).
  bool makes_runs = false;
};

// The environment every run starts from; --env entries replace or add.
std::vector<std::pair<std::string, std::string>> default_environment();

// Parses "KEY=VALUE" (KEY a valid name, see is_env_name; no NUL); throws UsageError.
std::pair<std::string, std::string> parse_env_assignment(const std::string& text);

// Whether name is a variable name a shell could set: [A-Za-z_][A-Za-z0-9_]*.
bool is_env_name(std::string_view name);

// Why a variable may not be set in a sandbox (LD_PRELOAD and the like:
// they would change what every program there loads), or "".
std::string env_name_refusal(std::string_view name);

// The longest NAME=VALUE the kernel passes to a program, its NUL included
// (MAX_ARG_STRLEN): a longer one fails every execve of the run.
inline constexpr size_t kMaxEnvEntry = 128 * 1024;

// Sets key=value in env, replacing an existing key.
void set_env(std::vector<std::pair<std::string, std::string>>& env, std::string key, std::string value);

// Checks the spec for values no run may have; throws UsageError naming the field.
void validate(const RunSpec& spec);

}  // namespace nsbox
