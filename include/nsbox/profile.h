// Profiles: per-tenant policy loaded strictly from YAML into an immutable,
// validated value. A profile says what a run may see of the filesystem, how
// much it may use and which seccomp policy it runs under.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nsbox/egress_policy.h"

namespace nsbox {

// An error in a profile: names the file, line and column (1-based) and what
// was expected. what() is "FILE:LINE:COL: MESSAGE", or "FILE: MESSAGE" when
// line is 0 (no position: the file cannot be read, a profile is not found).
class ProfileError : public std::runtime_error {
 public:
  ProfileError(std::string file, int line, int column, std::string message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string message_;
};

enum class MountMode { kReadOnly, kReadWrite };

struct ProfileMount {
  std::string source;  // absolute host path
  std::string target;  // absolute path inside the sandbox
  MountMode mode = MountMode::kReadOnly;
  bool noexec = false;

  bool operator==(const ProfileMount&) const = default;
};

struct ProfileTmpfs {
  std::string path;   // absolute path inside the sandbox
  uint64_t size = 0;  // bytes

  bool operator==(const ProfileTmpfs&) const = default;
};

struct ProfileWorkspace {
  std::string path = "/workspace";            // inside the sandbox
  uint64_t max_artifacts = 64;                // files under <path>/out returned
  uint64_t max_artifact_bytes = 16ull << 20;  // their total size

  bool operator==(const ProfileWorkspace&) const = default;
};

enum class Enforcement { kStrict, kBestEffort };

// The lowest limits a profile may set. A run's overrides are held to them
// too: below them a limit stops working (a memory.max of 0 is no limit,
// 1ms of CPU time is less than the supervisor's sampling).
inline constexpr std::chrono::milliseconds kMinLimitTime{10};
inline constexpr uint64_t kMinMemoryLimit = 16ull << 20;
inline constexpr double kMinCpus = 0.01;
// The sandbox's PID 1 and the workload: with fewer, nothing can run.
inline constexpr uint64_t kMinPids = 2;

struct ProfileLimits {
  std::chrono::milliseconds wall_time{30000};
  std::chrono::milliseconds cpu_time{30000};
  uint64_t memory = 512ull << 20;
  uint64_t pids = 128;
  double cpus = 1.0;             // CPU bandwidth, in CPUs
  uint64_t tmpfs = 64ull << 20;  // size of /tmp unless filesystem.tmpfs says otherwise
  uint64_t stdout_bytes = 1ull << 20;
  uint64_t stderr_bytes = 1ull << 20;
  uint64_t open_files = 256;
  uint64_t file_size = 64ull << 20;
  uint64_t inotify_instances = 8;  // of the user namespace; charged to host root
  uint64_t inotify_watches = 8192;
  Enforcement enforcement = Enforcement::kStrict;

  bool operator==(const ProfileLimits&) const = default;
};

enum class NetworkMode {
  kNone,    // a network namespace with only loopback
  kEgress,  // the same, plus nsbox's proxy on 127.0.0.1, deciding by `egress`
};

struct Profile {
  std::string name;
  std::string source_file;               // where it was loaded from ("<embedded>" for built-ins)
  std::vector<std::string> inheritance;  // names of the profiles it extends, nearest first
  ProfileLimits limits;
  std::string rootfs = "default";  // "default" or an absolute path
  std::vector<ProfileMount> mounts;
  std::vector<ProfileTmpfs> tmpfs;  // /tmp is always present
  std::vector<std::string> mask;    // absolute paths hidden inside
  std::optional<ProfileWorkspace> workspace;
  std::map<std::string, std::string> env;
  // "default", "strict", or "allow" exactly when seccomp_allow is non-empty.
  std::string seccomp = "default";
  // Written `seccomp: {allow: [...]}` in a profile, or in the rule file a
  // profile names (read as it loads); set by profiles migrated from the
  // platform's sandbox_config.yaml: an allow list of syscall names (x86_64);
  // everything else is denied (EPERM).
  std::vector<std::string> seccomp_allow;
  NetworkMode network = NetworkMode::kNone;
  EgressPolicy egress;  // used with NetworkMode::kEgress
  uid_t uid = 65534;
  gid_t gid = 65534;
  // The node's warm runs of these languages are forked from a fork server
  // (a zygote with the interpreter started) instead of started from
  // nothing; see docs/SECURITY.md, "Fork server", for what that shares
  // between runs. YAML: true (both), false, or a list of languages.
  struct ForkServer {
    bool python = false;
    bool javascript = false;
    bool any() const { return python || javascript; }
    bool operator==(const ForkServer&) const = default;
  };
  ForkServer fork_server;

  bool operator==(const Profile&) const = default;
};

}  // namespace nsbox
