#include "nsbox/fork_server.h"

#include <sys/mount.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "nsbox/digest.h"
#include "nsbox/mounts.h"
#include "nsbox/unique_fd.h"
#include "nsbox/userns.h"
#include "nsbox/workspace.h"

namespace nsbox {

// A message on a Unix datagram socket may be as large as the sender's send
// buffer, by default about 208 KiB (net.core.wmem_default): a fork request
// carrying a profile's large env would fail with EMSGSIZE. A profile whose
// runs' requests exceed fork_request_capacity() is refused when the node
// loads it (prepare_forked checks each one again).
void make_room_for_a_fork_request(int sock) {
  const int bytes = static_cast<int>(kMaxForkRequestBytes + kForkRequestHeadroom);
  if (::setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    ::setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

size_t fork_request_capacity() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  const UniqueFd a(sv[0]), b(sv[1]);
  make_room_for_a_fork_request(a.get());
  int buffer = 0;
  socklen_t length = sizeof buffer;
  if (::getsockopt(a.get(), SOL_SOCKET, SO_SNDBUF, &buffer, &length) != 0 ||
      static_cast<size_t>(buffer) <= kForkRequestHeadroom)
    return 0;
  return std::min(kMaxForkRequestBytes, static_cast<size_t>(buffer) - kForkRequestHeadroom);
}

namespace {

constexpr unsigned long kNoDevSuid = MS_NOSUID | MS_NODEV;

bool is_python(const RunSpec& spec) { return !spec.argv.empty() && spec.argv[0].find("python") != std::string::npos; }

bool is_node(const RunSpec& spec) { return !spec.argv.empty() && spec.argv[0] == "node"; }

}  // namespace

std::string fork_server_refusal(const RunSpec& spec) {
  if (!is_python(spec) && !is_node(spec)) return "the fork server runs Python and JavaScript only";
  if (spec.egress) return "network.mode egress is not offered by the fork server (its proxy is per sandbox)";
  if (spec.stdio != StdioMode::kCapture || !spec.capture_fd3) return "the fork server runs agent code only";
  if (spec.workspace && !spec.workspace->inputs.empty()) return "the fork server's workspaces take no input files";
  // A run mounts fresh tmpfs on these, which would hide binds below them.
  std::vector<std::string> fresh = {"/tmp", "/dev/shm"};
  for (const auto& t : spec.tmpfs) fresh.push_back(t.target);
  if (spec.workspace) fresh.push_back(spec.workspace->inside_path);
  for (const auto& b : spec.binds)
    for (const auto& f : fresh)
      if (b.target.rfind(f + "/", 0) == 0)
        return "the bind mount on " + b.target + " lies under " + f + ", which each forked run mounts afresh";
  for (const auto& m : spec.masks)
    for (const auto& f : fresh)
      if (m == f || m.rfind(f + "/", 0) == 0)
        return "the mask on " + m + " would be uncovered: each forked run mounts " + f + " afresh";
  return "";
}

RunSpec fork_server_spec(const RunSpec& run_spec, int control_fd) {
  RunSpec spec = run_spec;
  // V8 single-threaded: a forked run has only the thread that forked it
  // (zygote.js).
  spec.argv = is_node(run_spec) ? std::vector<std::string>{spec.argv.at(0), "--single-threaded", kNodeForkServerScript}
                                : std::vector<std::string>{spec.argv.at(0), kForkServerScript};
  spec.seccomp = SeccompChoice{SeccompChoice::kForkServer, {}};
  spec.mask_proc = false;
  spec.makes_runs = true;
  spec.fd3_socket = control_fd;
  spec.capture_fd3 = false;
  spec.stdin_data.reset();
  // What it writes is read as it comes and logged (the keeper): room for
  // whole lines between two reads, whatever the profile's output limits.
  spec.limits.stdout_bytes = kForkServerOutputBytes;
  spec.limits.stderr_bytes = kForkServerOutputBytes;
  spec.limits.wall_time = std::chrono::milliseconds(0);
  spec.limits.cpu_time = std::chrono::milliseconds(0);
  spec.egress.reset();
  // Each run mounts a fresh tmpfs on the workspace path, which must exist.
  if (spec.workspace) spec.tmpfs.push_back({spec.workspace->inside_path, 4096});
  spec.workspace.reset();
  return spec;
}

std::string fork_request(const RunSpec& spec, const std::vector<RlimitSetting>& rlimits,
                         const SeccompProgram& program) {
  using json = nlohmann::json;
  const std::string tmp_size = "size=" + std::to_string(spec.limits.tmpfs_bytes);
  // Everything a run may write, or see of another run, is its own: the
  // zygote's are shared by every run it forks.
  json tmpfs = json::array();
  tmpfs.push_back({{"target", "/dev/shm"}, {"flags", kNoDevSuid | MS_NOEXEC}, {"data", "mode=1777," + tmp_size}});
  tmpfs.push_back({{"target", "/tmp"}, {"flags", kNoDevSuid}, {"data", "mode=1777," + tmp_size}});
  std::vector<TmpfsMount> own = spec.tmpfs;  // parents before children
  std::stable_sort(own.begin(), own.end(), [](const TmpfsMount& a, const TmpfsMount& b) {
    return std::count(a.target.begin(), a.target.end(), '/') < std::count(b.target.begin(), b.target.end(), '/');
  });
  for (const auto& t : own)
    tmpfs.push_back(
        {{"target", t.target}, {"flags", kNoDevSuid}, {"data", "mode=1777,size=" + std::to_string(t.size_bytes)}});
  Masks masks = proc_masks_for(spec);
  json files = masks.files, dirs = masks.dirs;
  json limits = json::array();
  // -1 is RLIM_INFINITY, as Python's resource module spells it.
  auto value = [](rlim_t v) { return v == RLIM_INFINITY ? json(-1) : json(static_cast<uint64_t>(v)); };
  for (const auto& r : rlimits) limits.push_back({r.resource, value(r.value.rlim_cur), value(r.value.rlim_max)});
  json quotas = json::array();
  for (const auto& q : user_ns_quotas(spec.limits.inotify_instances, spec.limits.inotify_watches))
    quotas.push_back({q.name, q.value});
  json env = json::array();
  for (const auto& [k, v] : spec.env) env.push_back({k, v});
  const sock_fprog* prog = program.program();
  json j = {{"hostname", spec.hostname},
            {"tmpfs", std::move(tmpfs)},
            {"workspace", spec.workspace ? json{{"path", spec.workspace->inside_path},
                                                {"size", spec.workspace->size_bytes},
                                                {"inodes", workspace_inodes(*spec.workspace)}}
                                         : json(nullptr)},
            {"proc_mask_files", std::move(files)},
            {"proc_mask_dirs", std::move(dirs)},
            {"rlimits", std::move(limits)},
            {"quotas", std::move(quotas)},
            {"cwd", spec.cwd},
            {"env", std::move(env)},
            {"seccomp", to_hex(reinterpret_cast<const unsigned char*>(prog->filter), prog->len * sizeof(sock_filter))},
            {"notify", program.notifies()}};
  return j.dump();
}

size_t largest_fork_request_bytes(const RunSpec& spec) {
  const SeccompProgram program = SeccompProgram::for_choice(spec.seccomp);
  // As on a host with none of the controllers the limits need (a forked
  // run's CPU time always comes from its cgroup).
  std::set<std::string> missing;
  if (spec.limits.cgroup.memory_bytes) missing.insert("memory");
  if (spec.limits.cgroup.pids) missing.insert("pids");
  return 1 + fork_request(spec, forked_run_rlimits(spec.limits, missing), program).size();
}

std::vector<RlimitSetting> forked_run_rlimits(const Limits& limits, const std::set<std::string>& missing) {
  std::vector<RlimitSetting> rlimits = rlimits_for(limits);
  // Inherited from the fork server, whose filter refuses setting it.
  std::erase_if(rlimits, [](const RlimitSetting& r) { return r.resource == RLIMIT_CORE; });
  for (const auto& extra : standin_rlimits(limits, missing, false)) rlimits.push_back(extra);
  for (const auto& charged : charged_rlimits()) rlimits.push_back(charged);  // PID 1's too (forkinit.c)
  return rlimits;
}

}  // namespace nsbox
