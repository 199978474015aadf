#include "nsbox/doctor.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "nsbox/cgroup.h"
#include "nsbox/error.h"
#include "nsbox/fd_passing.h"
#include "nsbox/mounts.h"
#include "nsbox/profile_apply.h"
#include "nsbox/rlimits.h"
#include "nsbox/sandbox.h"
#include "nsbox/seccomp.h"
#include "nsbox/unique_fd.h"
#include "nsbox/units.h"
#include "nsbox/userns.h"

namespace nsbox {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Tries to create the namespaces in a throwaway child; returns 0 or errno.
int probe_unshare(int flags) {
  pid_t pid = ::fork();
  if (pid < 0) return errno;
  if (pid == 0) ::_exit(::unshare(flags) == 0 ? 0 : (errno & 0x7f));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

// Every namespace a fork server creates for a run (its PID 1 is cloned into
// the user and pid ones and unshares the rest; one unshare probes them all).
constexpr int kForkedRunNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

// The same as probe_unshare, as the sandbox's unprivileged host user (when
// this process can become it) and without any capability.
int probe_unprivileged_unshare(int flags, const HostIds& ids) {
  pid_t pid = ::fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(ids.gid, ids.gid, ids.gid) != 0 ||
                             ::setresuid(ids.uid, ids.uid, ids.uid) != 0))
      ::_exit(EPERM);
    if (::unshare(flags) != 0) ::_exit(errno & 0x7f);
    // Some hosts let the namespace be created but withhold the capabilities
    // in it (AppArmor's restrict_unprivileged_userns): try a mount.
    ::_exit(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 ? 0 : (errno & 0x7f));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

// Whether this process can take a descriptor out of a process like a
// sandbox's workload (the sandbox's host user, in a user namespace of its
// own, not dumpable) with pidfd_getfd, as it takes each sandbox's seccomp
// listener (fd_passing.h); 0 or errno.
int probe_taking_descriptors(const HostIds& ids) {
  int ready_fds[2];
  int hold_fds[2];
  if (::pipe2(ready_fds, O_CLOEXEC) != 0) return errno;
  UniqueFd ready_in(ready_fds[0]), ready_out(ready_fds[1]);
  if (::pipe2(hold_fds, O_CLOEXEC) != 0) return errno;
  UniqueFd hold_in(hold_fds[0]), hold_out(hold_fds[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(ids.gid, ids.gid, ids.gid) != 0 ||
                             ::setresuid(ids.uid, ids.uid, ids.uid) != 0))
      ::_exit(1);
    (void)::unshare(CLONE_NEWUSER);
    (void)::prctl(PR_SET_DUMPABLE, 0);  // as a sandbox's PID 1 and workload are
    const int32_t fd = hold_in.get();   // what it offers: any descriptor of its own
    hold_out.reset();
    (void)!::write(ready_out.get(), &fd, sizeof fd);
    char byte;
    (void)!::read(hold_in.get(), &byte, 1);  // until the parent is done
    ::_exit(0);
  }
  ready_out.reset();
  hold_in.reset();
  int32_t fd = -1;
  int result = EIO;
  if (::read(ready_in.get(), &fd, sizeof fd) == sizeof fd) {
    const UniqueFd taken(take_fd_from(pid, fd));
    result = taken ? 0 : errno;
  }
  hold_out.reset();  // the child's read ends
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

std::string join_words(const std::set<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

struct Report {
  std::ostream& out;
  bool ok = true;
  void line(bool good, bool required, const std::string& what, const std::string& detail) {
    if (!good && required) ok = false;
    out << (good ? "  ok    " : required ? "  FAIL  " : "  warn  ") << what;
    if (!detail.empty()) out << ": " << detail;
    out << "\n";
  }
};

void check_namespaces(Report& r) {
  r.out << "namespaces\n";
  std::string max_userns = read_file("/proc/sys/user/max_user_namespaces");
  r.line(!max_userns.empty() && max_userns != "0", true, "user namespaces allowed",
         "max_user_namespaces=" + (max_userns.empty() ? "?" : max_userns));
  std::string unpriv = read_file("/proc/sys/kernel/unprivileged_userns_clone");
  if (!unpriv.empty())
    r.line(unpriv == "1" || ::geteuid() == 0, ::geteuid() != 0, "unprivileged user namespaces",
           "kernel.unprivileged_userns_clone=" + unpriv);
  const std::pair<int, const char*> kinds[] = {
      {CLONE_NEWNS, "mount"}, {CLONE_NEWPID, "pid"}, {CLONE_NEWNET, "net"},
      {CLONE_NEWIPC, "ipc"},  {CLONE_NEWUTS, "uts"}, {CLONE_NEWCGROUP, "cgroup"},
  };
  int err = probe_unshare(CLONE_NEWUSER);
  r.line(err == 0, true, "user namespace", err ? std::strerror(err) : "created");
  for (const auto& [flag, name] : kinds) {
    err = probe_unshare(CLONE_NEWUSER | flag);
    r.line(err == 0, true, std::string(name) + " namespace", err ? std::strerror(err) : "created");
  }
  HostIds ids = choose_host_ids();
  r.line(ids.uid != 0, true, "sandbox user 65534 maps to host uid " + std::to_string(ids.uid), ids.source);
  // The fork server (profile key fork_server) has each run's child create
  // its namespaces without any privilege, in a user namespace of its own:
  // a host that allows user namespaces only to root refuses that.
  err = probe_unprivileged_unshare(kForkedRunNamespaces, ids);
  r.line(err == 0, false, "namespaces created without privilege (fork_server)",
         err ? std::string(std::strerror(err)) + ": profiles with a fork_server cannot run here" : "created");
}

void check_cgroups(Report& r) {
  r.out << "cgroups\n";
  const CgroupHost host = CgroupHost::detect();
  if (host.v2_mount) {
    r.line(true, false, "cgroup v2 at " + *host.v2_mount,
           "nsbox's cgroup " + host.v2_self_dir + " offers {" + join_words(host.v2_controllers) + "}");
  } else {
    r.out << "  info  cgroup v2 is not mounted\n";
  }
  for (const auto& [controller, dir] : host.v1_self_dirs) {
    if (controller == "memory" || controller == "cpu" || controller == "cpuacct" || controller == "pids" ||
        controller == "freezer")
      r.line(true, false, "cgroup v1 " + controller, dir);
  }
  const std::set<std::string> all = {"memory", "cpu", "pids"};
  const std::string version = host.choose(all);
  const std::set<std::string> missing = host.missing(all);
  r.line(missing.empty(), false, "limits enforced through",
         version.empty() ? std::string("nothing: runs asking for limits are refused unless best-effort")
                         : "cgroup " + version +
                               (missing.empty() ? std::string()
                                                : " (missing: " + join_words(missing) +
                                                      "; profiles needing them are refused unless best-effort)"));
}

void check_seccomp(Report& r) {
  r.out << "seccomp\n";
  int mode = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  r.line(mode >= 0, true, "seccomp filters", mode >= 0 ? "available" : std::strerror(errno));
  const std::string inherited = inherited_seccomp_warning();
  r.line(inherited.empty(), false, "filters nsbox runs under", inherited.empty() ? "none" : inherited);
  const std::string openat2 = openat2_problem();
  r.line(openat2.empty(), true, "openat2", openat2.empty() ? "available" : openat2);
  std::string actions = read_file("/proc/sys/kernel/seccomp/actions_avail");
  r.line(actions.find("kill_process") != std::string::npos, true, "actions", actions);
  try {
    SeccompProgram program = SeccompProgram::default_policy();
    r.line(true, true, "default policy compiles",
           std::to_string(program.instruction_count()) + " BPF instructions, " +
               std::to_string(program.rules().size()) + " rules");
  } catch (const SysError& e) {
    r.line(false, true, "default policy compiles", e.what());
  }
}

// What the kernel's objects cost a run's memory cgroup, measured (an epoll
// watch with its eventfd; a file mapped and closed, which no RLIMIT_NOFILE
// counts), so how many a run's memory limit lets it hold.
constexpr uint64_t kEpollWatchBytes = 250;
constexpr uint64_t kOpenFileBytes = 430;

// A quota of host root's that the kernel charges every run's use to (it
// owns the runs' user namespaces): the runs alive at once may together hold
// runs x per_run, which must leave some to host root's own programs.
void check_charged_quota(Report& r, const std::string& what, const std::string& host_name,
                         std::optional<uint64_t> host_max, uint64_t runs, uint64_t per_run) {
  const uint64_t all = runs * per_run;
  const std::string held =
      std::to_string(runs) + " x " + std::to_string(per_run) + " = " + std::to_string(all) + " of it";
  if (!host_max) {
    r.line(false, false, what, host_name + " cannot be read; the runs may hold " + held);
  } else if (all < *host_max) {
    r.line(true, false, what,
           host_name + "=" + std::to_string(*host_max) + "; the runs hold at most " + held + ", leaving " +
               std::to_string(*host_max - all) + " to host root's own programs");
  } else {
    r.line(false, false, what,
           host_name + "=" + std::to_string(*host_max) + "; the runs could hold " + held +
               ": all of host root's, which its own programs need too. Raise it well above " + std::to_string(all) +
               ", or lower max_concurrent (docs/OPERATIONS.md, \"Host root's per-user quotas\")");
  }
}

// A host-wide count the kernel bounds a run's share of only through the
// objects' memory, charged to the run: the runs alive at once may hold
// runs x memory / bytes_each (measured sizes) before the count runs out
// for everyone else (`who_else`).
void check_memory_bounded_count(Report& r, const std::string& what, const std::string& host_name,
                                std::optional<uint64_t> host_max, uint64_t runs, uint64_t memory, uint64_t bytes_each,
                                const std::string& who_else) {
  const uint64_t all = runs * (memory / bytes_each);
  const std::string held = std::to_string(runs) + " x " + format_size(memory) + " / " + std::to_string(bytes_each) +
                           " bytes = " + std::to_string(all);
  if (!host_max) {
    r.line(false, false, what, host_name + " cannot be read; the runs may hold " + held);
  } else if (all < *host_max) {
    r.line(true, false, what, host_name + "=" + std::to_string(*host_max) + "; the runs hold at most " + held);
  } else {
    r.line(false, false, what,
           host_name + "=" + std::to_string(*host_max) + "; the runs could hold " + held + ": all of it, and " +
               who_else + ". Raise it above " + std::to_string(all) +
               ", or lower max_concurrent or limits.memory (docs/SECURITY.md)");
  }
}

std::optional<uint64_t> read_count(const std::string& path) {
  const std::string text = read_file(path);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(text);
}

// What the runs of the node (max_concurrent of them, under the largest
// quotas any of its profiles, or those given, allows) may take of host
// root's per-user quotas. Warm sandboxes run no code and hold none.
void check_host_quotas(Report& r, const DoctorOptions& options) {
  r.out << "host root's per-user quotas\n";
  uint64_t instances = 0;
  uint64_t watches = 0;
  uint64_t memory = 0;
  auto take_largest = [&](const Profile& p) {
    instances = std::max(instances, p.limits.inotify_instances);
    watches = std::max(watches, p.limits.inotify_watches);
    memory = std::max(memory, p.limits.memory);
  };
  for (const TenantConfig& tenant : options.node.tenants) take_largest(tenant.profile);
  for (const Profile& profile : options.profiles) take_largest(profile);
  const uint64_t runs = options.node.max_concurrent;
  r.out << "  info  runs alive at once: " << runs << " (max_concurrent of "
        << (options.node_given ? options.node.source : std::string("the built-in node, one per CPU")) << ")\n";
  check_charged_quota(r, "inotify instances", "fs.inotify.max_user_instances",
                      read_count("/proc/sys/fs/inotify/max_user_instances"), runs, instances);
  check_charged_quota(r, "inotify watches", "fs.inotify.max_user_watches",
                      read_count("/proc/sys/fs/inotify/max_user_watches"), runs, watches);
  // Counted per host user (every sandbox's is one) or host-wide, and bounded
  // for a run only by its memory (docs/SECURITY.md).
  check_memory_bounded_count(r, "epoll watches", "fs.epoll.max_user_watches",
                             read_count("/proc/sys/fs/epoll/max_user_watches"), runs, memory, kEpollWatchBytes,
                             "every other run's epoll_ctl fails with ENOSPC");
  check_memory_bounded_count(r, "open files", "fs.file-max", read_count("/proc/sys/fs/file-max"), runs, memory,
                             kOpenFileBytes, "the host's other processes get ENFILE");
  // Each run's RLIMIT_SIGPENDING (charged_rlimits()); host root's programs
  // are checked against their own, which nsbox serve's usually equals.
  uint64_t signals = kRunPendingSignals;
  for (const RlimitSetting& s : charged_rlimits())
    if (s.resource == RLIMIT_SIGPENDING) signals = s.value.rlim_cur;
  rlimit own{};
  std::optional<uint64_t> own_pending;
  if (::getrlimit(RLIMIT_SIGPENDING, &own) == 0) own_pending = own.rlim_cur;
  if (own_pending && own.rlim_cur == RLIM_INFINITY)
    r.line(true, false, "pending signals", "RLIMIT_SIGPENDING of this process is unlimited");
  else
    check_charged_quota(r, "pending signals", "RLIMIT_SIGPENDING of this process", own_pending, runs, signals);
  // Descriptors in flight are counted per host user too; nsbox takes each
  // sandbox's seccomp listener out of it instead of having it sent.
  const int err = probe_taking_descriptors(choose_host_ids());
  r.line(err == 0, false, "descriptors taken from sandboxes (pidfd_getfd)",
         err ? std::string(std::strerror(err)) +
                   ": sandboxes send their seccomp listener with SCM_RIGHTS instead, and one run holding "
                   "descriptors in flight can keep every other sandbox from starting (docs/SECURITY.md)"
             : "taken");
}

// Runs /bin/true in a real sandbox built from spec; its warnings (what the
// run went without) are warn lines.
void test_launch(Report& r, RunSpec spec, const std::string& what) {
  try {
    Launcher launcher;
    spec.argv = {"/bin/true"};
    spec.stdio = StdioMode::kCapture;
    spec.limits.wall_time = std::chrono::seconds(10);
    const Result result = launcher.run(spec);
    r.line(result.status == RunStatus::kOk, true, what,
           result.status == RunStatus::kOk
               ? std::to_string(result.wall_ms) + " ms"
               : result.error + (result.stderr_data.empty() ? "" : " " + result.stderr_data));
    for (const auto& warning : result.warnings) r.line(false, false, "the run warned", warning);
  } catch (const std::exception& e) {
    r.line(false, true, what, e.what());
  }
}

void check_rootfs(Report& r, const std::string& rootfs, const std::optional<Profile>& default_profile,
                  const std::string& default_profile_error) {
  r.out << "rootfs\n";
  struct stat st {};
  if (::stat(rootfs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    r.line(false, true, "rootfs " + rootfs,
           std::string(std::strerror(errno ? errno : ENOTDIR)) + " (build it: tools/build-rootfs)");
    return;
  }
  r.line(true, true, "rootfs " + rootfs, "");
  for (const char* bin : {"/usr/bin/python3", "/usr/local/bin/node", "/bin/sh"}) {
    r.line(::access((rootfs + bin).c_str(), X_OK) == 0, true, std::string("has ") + bin, "");
  }
  std::string manifest_text = read_file(rootfs + "/etc/nsbox/manifest.json");
  if (manifest_text.empty()) {
    r.line(false, false, "manifest", "no /etc/nsbox/manifest.json");
  } else {
    auto m = nlohmann::json::parse(manifest_text, nullptr, false);
    if (m.is_discarded()) {
      r.line(false, false, "manifest", "not valid JSON");
    } else {
      auto str = [&](const char* key) { return m.contains(key) ? m[key].dump() : "?"; };
      r.line(true, false, "manifest",
             "built_at " + str("built_at") + ", recipe " + str("recipe_hash") + ", content " + str("content_hash"));
    }
  }
  // The real thing: build a sandbox as `nsbox run` does without flags (its
  // limits, its workspace) and run /bin/true in it. A bare sandbox could
  // start where every default run is refused (an ordinary user cannot make
  // the run's cgroup or cap its workspace).
  if (!default_profile) return r.line(false, true, "default profile", default_profile_error);
  RunSpec spec = spec_from_profile(*default_profile);
  spec.rootfs = rootfs;
  test_launch(r, std::move(spec), "test launch of /bin/true under the default profile");
}

// What a profile would lose here: the limits it asks for that no cgroup of
// nsbox's enforces (its runs refused, or the limits dropped under
// best-effort), whether its fork server's runs can make their namespaces,
// and a real launch under it, whose warnings say what else it runs without.
void check_profile(Report& r, const Profile& profile, const std::optional<std::string>& rootfs, const CgroupHost& host,
                   int unprivileged_namespaces) {
  r.out << "profile " << profile.name << "\n";
  RunSpec spec = spec_from_profile(profile);
  if (rootfs) spec.rootfs = *rootfs;
  const std::set<std::string> needed = controllers_for(spec.limits.cgroup);
  const std::set<std::string> missing = host.missing(needed);
  if (needed.empty()) {
    r.out << "  info  limits: it asks for no cgroup limit\n";
  } else if (missing.empty()) {
    r.line(true, true, "limits", "{" + join_words(needed) + "} enforced through cgroup " + host.choose(needed));
  } else if (spec.limits.best_effort) {
    r.line(false, false, "limits", "not enforced here: " + join_words(missing) + " (enforcement: best-effort)");
  } else {
    r.line(false, true, "limits",
           "its runs are refused here: no " + join_words(missing) +
               " controller in nsbox's cgroup (limits.enforcement: best-effort would accept less)");
  }
  if (profile.fork_server.any()) {
    // Each forked run's PID 1 makes its namespaces without privilege: when
    // it cannot, that run fails (docs/OPERATIONS.md, "Troubleshooting").
    r.line(unprivileged_namespaces == 0, true, "fork_server",
           unprivileged_namespaces == 0 ? "its runs can be forked"
                                        : std::string(std::strerror(unprivileged_namespaces)) +
                                              ": its forked runs would fail here; set fork_server: false");
  }
  test_launch(r, std::move(spec), "test launch of /bin/true under profile " + profile.name);
}

// The profiles given, then those of --config's tenants; each once, however
// many tenants share it.
std::vector<Profile> profiles_to_check(const DoctorOptions& options) {
  std::vector<Profile> out = options.profiles;
  if (!options.node_given) return out;
  std::set<std::string> seen;
  for (const Profile& p : out) seen.insert(to_yaml(p));
  for (const TenantConfig& tenant : options.node.tenants)
    if (seen.insert(tenant.profile_yaml).second) out.push_back(tenant.profile);
  return out;
}

}  // namespace

int run_doctor(const DoctorOptions& options, std::ostream& out) {
  Report report{out};
  out << "nsbox " << NSBOX_VERSION << " on kernel ";
  out << read_file("/proc/sys/kernel/osrelease") << ", running as uid " << ::geteuid() << "\n";
  check_namespaces(report);
  check_seccomp(report);
  check_cgroups(report);
  check_host_quotas(report, options);
  check_rootfs(report, options.rootfs, options.default_profile, options.default_profile_error);
  const bool defaults_ok = report.ok;
  const std::vector<Profile> profiles = profiles_to_check(options);
  if (!profiles.empty()) {
    const CgroupHost host = CgroupHost::detect();
    const bool forks =
        std::any_of(profiles.begin(), profiles.end(), [](const Profile& p) { return p.fork_server.any(); });
    const int unprivileged = forks ? probe_unprivileged_unshare(kForkedRunNamespaces, choose_host_ids()) : 0;
    for (const Profile& profile : profiles)
      check_profile(report, profile, options.rootfs_given ? std::optional(options.rootfs) : std::nullopt, host,
                    unprivileged);
  }
  if (report.ok)
    out << (profiles.empty() ? "nsbox can run here\n" : "nsbox can run here, with these profiles\n");
  else if (defaults_ok)
    out << "nsbox can run here, but not every profile as written: see FAIL lines\n";
  else
    out << "nsbox cannot run here with its defaults: see FAIL lines\n";
  return report.ok ? 0 : 1;
}

}  // namespace nsbox
