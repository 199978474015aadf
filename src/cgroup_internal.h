// Helpers shared by the cgroup v1 and v2 implementations.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nsbox/cgroup.h"
#include "nsbox/unique_fd.h"

namespace nsbox::cgroup_internal {

// Reads file name relative to directory fd dir (AT_FDCWD: name is a path).
bool try_read_at(int dir, const char* name, std::string* out);
// Writes value to file name relative to dir; errors name the file as
// dir_path/name (just name when dir_path is empty).
void write_at(int dir, const char* name, const std::string& value, const std::string& dir_path);
std::string read_text(const std::string& path);
bool try_read_text(const std::string& path, std::string* out);
void write_text(const std::string& path, const std::string& value);
int64_t read_keyed(const std::string& path, const std::string& key);
int64_t read_number(const std::string& path);
void make_dir(const std::string& path);
std::vector<pid_t> read_pids(const std::string& procs_file);
std::vector<std::string> list_subdirs(const std::string& dir);
std::string process_start_time(pid_t pid);
// The inode number of this process's pid namespace, as text.
std::string own_pid_namespace();
// False only for a run-<pid>-<start>-<n>-p<pidns> name of this pid
// namespace whose nsbox process is gone (or an older name without the
// namespace whose pid is gone).
bool run_owner_alive(const std::string& run_name);

// rmdir of a run cgroup, retried (killing stragglers) while the kernel still
// counts exiting members, for up to `wait`. False when the directory is
// still there: a member SIGKILL has not ended (stuck in the kernel).
bool remove_when_empty(const std::string& dir, std::chrono::milliseconds wait);

// Notes that a run cgroup of this process could not be removed
// (run_cgroup_left_behind() tells).
void note_run_cgroup_left_behind();

// A run cgroup's directory, held open: its files are opened relative to it,
// so no read or write walks the whole path from / again.
struct CgroupDir {
  std::string path;
  UniqueFd fd;  // O_PATH | O_DIRECTORY

  // Throws SysError naming path when it cannot be opened.
  static CgroupDir open(const std::string& path);
  void write(const char* name, const std::string& value) const;  // throws SysError
  bool has(const char* name) const;
  int64_t number(const char* name) const;                         // -1 when unreadable
  int64_t keyed(const char* name, const std::string& key) const;  // -1 when absent
  std::vector<pid_t> members() const;                             // cgroup.procs
};

// The cgroup v1 hierarchies a run gets a cgroup in; cpuacct gives CPU
// usage, freezer a clean kill.
constexpr const char* kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids", "freezer"};

// The directory under nsbox's own cgroup that holds its run cgroups.
constexpr const char* kParentName = "nsbox";
// The leaf of nsbox's own cgroup that nsbox's processes move into on
// cgroup v2, so that the cgroup may hand controllers down to run cgroups.
// An nsbox started in it (a node's spawner, forked after the move) counts
// the cgroup above as its own.
constexpr const char* kSupervisorLeaf = "nsbox-supervisor";
// Runs make_run, which makes a run's directory in own_dir's kParentName
// directory (a parent that has a run cannot be removed). Another nsbox
// sharing own_dir removes that parent when it ends and finds it empty
// (remove_empty_run_parents), under an exclusive flock of own_dir. When the
// parent is gone, it is made again and make_run runs again, under a shared
// flock when one can be had at once (no removal comes between), else
// retried, up to kParentGoneRetries times: locks are never waited for, as
// any user can flock the directory. Throws SysError.
constexpr int kParentGoneRetries = 100;
void make_in_run_parent(const std::string& own_dir, const std::function<void()>& make_run);

// /proc/PID/cgroup (pid 0: this process) as controller -> path, relative
// to this process's cgroup namespace; v2's line has the controller "".
// Empty when the process is gone.
std::map<std::string, std::string> cgroup_paths_of(pid_t pid);
// Whether a /proc/PID/cgroup path names run cgroup dir: both end in the
// same "/nsbox/run-..." (run names are unique per nsbox process).
bool ends_with_dir(const std::string& cgroup_path, const std::string& dir);

}  // namespace nsbox::cgroup_internal

namespace nsbox {

std::unique_ptr<RunCgroup> create_v2_run_cgroup(const CgroupHost& host, const CgroupLimits& limits,
                                                const std::string& run_name);
std::unique_ptr<RunCgroup> create_v1_run_cgroup(const CgroupHost& host, const CgroupLimits& limits,
                                                const std::string& run_name);
void remove_stale_v2(const CgroupHost& host, std::chrono::milliseconds wait, StaleSweep& sweep);
void remove_stale_v1(const CgroupHost& host, std::chrono::milliseconds wait, StaleSweep& sweep);

}  // namespace nsbox
