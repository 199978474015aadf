// Shared helpers for tests that start real sandboxes.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "nsbox/fork_server.h"
#include "nsbox/result.h"
#include "nsbox/run_spec.h"
#include "nsbox/runtime.h"
#include "nsbox/sandbox.h"

namespace nsbox::testing {

// The rootfs under test: $NSBOX_TEST_ROOTFS or the default location.
std::string test_rootfs();

// A capture-mode spec for argv on the test rootfs with a 30 s deadline.
RunSpec capture_spec(std::vector<std::string> argv);

// One Launcher for the whole test binary (it holds the compiled filter).
const Launcher& launcher();

// Runs argv in a sandbox and returns the Result.
Result run(std::vector<std::string> argv);
Result run_with(const RunSpec& spec);
// Runs `python3 -c code`; fails the test unless it exited 0; returns stdout.
std::string python(const std::string& code);

// Output and exit status of the nsbox binary run with args.
struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};
CliResult run_cli(const std::vector<std::string>& args);
// The same with another copy of nsbox (one that finds other profiles beside it).
CliResult run_cli_with_binary(const std::string& binary, const std::vector<std::string>& args);

// A domain name set in a test's own UTS namespace, and Python that prints
// the one it sees.
inline constexpr const char* kHostDomainName = "corp.example.internal";
inline constexpr const char* kPrintDomainName =
    "import ctypes; b = ctypes.create_string_buffer(256); ctypes.CDLL(None).getdomainname(b, 256); "
    "print(b.value.decode())";

// The exit code and output (stdout and stderr on one pipe) of nsbox args,
// run after in_child in the child's process (which must not allocate).
std::pair<int, std::string> run_cli_merged(const std::vector<std::string>& args, const std::function<void()>& in_child);

// Starts the nsbox binary in the background; returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args);
// waitpid for it; returns its exit code (128+signal when killed).
int wait_cli(pid_t pid);

// The runner contract's cases (tests/runners/cases.json) that nsbox exec can
// run (not those without a result fd), and the request of one of them.
const std::vector<nlohmann::json>& contract_cases();
ExecRequest contract_request(const nlohmann::json& c);

// Host pids whose command line contains `needle`.
std::vector<pid_t> host_pids_with_cmdline(const std::string& needle);
// Polls until a process matching needle exists (true) or timeout_ms passes.
// The processes whose command line contains needle and that descend from
// ancestor (other tests may run theirs at the same time).
std::vector<pid_t> descendants_with_cmdline(pid_t ancestor, const std::string& needle);
// The fork servers a node started: Python's (zygote.py) or, with
// kNodeForkServerScript, JavaScript's (zygote.js).
std::vector<pid_t> fork_servers_of(pid_t node, const std::string& script = kForkServerScript);
// Whether pid is alive with needle in its command line (not a reused pid).
bool process_alive_with_cmdline(pid_t pid, const std::string& needle);
bool wait_for_process(const std::string& needle, int timeout_ms);
// Polls until no process matches needle (true) or timeout_ms passes.
bool wait_for_no_process(const std::string& needle, int timeout_ms);

// True inside the cgroup v2 VM rig (tools/vm-test), where processes and pipes
// run ~50x slower: tests scale sizes, never assertions of behaviour.
bool in_vm_guest();

// A host directory for one test (mode 0755), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes name (relative) with text; returns its full path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

// The whole content of a (small) file, "" when it cannot be read.
std::string slurp(const std::string& path);
// The first line of a file, without its newline; "" when it cannot be read.
std::string first_line(const std::string& path);
// A field of /proc/PID/status ("VmHWM", "NSpid"), "" when it is not there.
std::string status_field(pid_t pid, const std::string& name);
// Names in a directory, without "." and "..".
std::set<std::string> dir_entries(const std::string& path);

// A cgroup's CPU weight file (v2 cpu.weight, v1 cpu.shares) with its values
// for nsbox's lowest start-up weight and for the default.
struct WeightFile {
  std::string path, lowest, default_value;
};
// The weight file of cgroup_dir, if it has one (its cpu controller is on).
std::optional<WeightFile> weight_file_in(const std::string& cgroup_dir);

// A string unique to this test process, for argv markers and file names.
std::string unique_token(const std::string& prefix);

}  // namespace nsbox::testing
