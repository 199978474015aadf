#include "nsbox/profile_apply.h"

#include <sstream>

#include "nsbox/egress.h"
#include "nsbox/error.h"
#include "nsbox/units.h"

namespace nsbox {

namespace {

std::string find_env(const std::vector<std::pair<std::string, std::string>>& env, const std::string& key) {
  for (const auto& [k, v] : env)
    if (k == key) return v;
  return "";
}

}  // namespace

std::string rootfs_path(const Profile& p) { return p.rootfs == "default" ? NSBOX_DEFAULT_ROOTFS : p.rootfs; }

RunSpec spec_from_profile(const Profile& p) {
  RunSpec spec;
  spec.rootfs = rootfs_path(p);
  spec.env = default_environment();
  for (const auto& [k, v] : p.env) set_env(spec.env, k, v);
  spec.sandbox_uid = p.uid;
  spec.sandbox_gid = p.gid;

  Limits& l = spec.limits;
  l.wall_time = p.limits.wall_time;
  l.cpu_time = p.limits.cpu_time;
  l.cgroup.memory_bytes = p.limits.memory;
  l.cgroup.pids = p.limits.pids;
  l.cgroup.cpus = p.limits.cpus;
  l.tmpfs_bytes = p.limits.tmpfs;
  l.stdout_bytes = p.limits.stdout_bytes;
  l.stderr_bytes = p.limits.stderr_bytes;
  l.open_files = p.limits.open_files;
  l.file_size = p.limits.file_size;
  l.inotify_instances = p.limits.inotify_instances;
  l.inotify_watches = p.limits.inotify_watches;
  l.best_effort = p.limits.enforcement == Enforcement::kBestEffort;

  for (const auto& m : p.mounts) spec.binds.push_back({m.source, m.target, m.mode == MountMode::kReadOnly, m.noexec});
  for (const auto& t : p.tmpfs) {
    if (t.path == "/tmp") {
      l.tmpfs_bytes = t.size ? t.size : p.limits.tmpfs;
    } else {
      spec.tmpfs.push_back({t.path, t.size ? t.size : p.limits.tmpfs});
    }
  }
  spec.masks = p.mask;
  if (p.workspace) {
    WorkspaceSpec ws;
    ws.inside_path = p.workspace->path;
    ws.size_bytes = p.limits.tmpfs;
    ws.max_artifacts = p.workspace->max_artifacts;
    ws.max_artifact_bytes = p.workspace->max_artifact_bytes;
    spec.workspace = ws;
  }

  if (p.network == NetworkMode::kEgress) {
    spec.egress = p.egress;
    for (auto& [k, v] : egress_environment(p.egress, find_env(spec.env, "NODE_OPTIONS"))) set_env(spec.env, k, v);
  }

  if (p.seccomp == "strict") {
    spec.seccomp.kind = SeccompChoice::kStrict;
  } else if (p.seccomp == "allow" || !p.seccomp_allow.empty()) {
    spec.seccomp.kind = SeccompChoice::kAllowList;
    spec.seccomp.allow = p.seccomp_allow;
  } else if (p.seccomp != "default") {
    // Fail closed: a policy nsbox cannot load is never silently replaced.
    throw UsageError("profile " + p.name + ": unknown seccomp policy " + p.seccomp);
  }
  return spec;
}

namespace {

std::string format_cpus(double cpus) {
  std::ostringstream out;
  out << cpus;
  return out.str();
}

[[noreturn]] void refuse(const std::string& what, const std::string& asked, const std::string& key,
                         const std::string& allowed) {
  throw UsageError(what + " " + asked + " exceeds the profile's limits." + key + " of " + allowed);
}

[[noreturn]] void refuse_below(const std::string& what, const std::string& asked, const std::string& lowest) {
  throw UsageError(what + " " + asked + " is below the lowest limit nsbox enforces, " + lowest);
}

}  // namespace

void apply_overrides(const Profile& p, const RunOverrides& o, RunSpec& spec) {
  Limits& l = spec.limits;
  if (o.wall_time) {
    if (*o.wall_time > p.limits.wall_time)
      refuse("timeout", format_duration(*o.wall_time), "wall_time", format_duration(p.limits.wall_time));
    if (*o.wall_time < kMinLimitTime)
      refuse_below("timeout", format_duration(*o.wall_time), format_duration(kMinLimitTime));
    l.wall_time = *o.wall_time;
  }
  if (o.cpu_time) {
    if (*o.cpu_time > p.limits.cpu_time)
      refuse("cpu time", format_duration(*o.cpu_time), "cpu_time", format_duration(p.limits.cpu_time));
    if (*o.cpu_time < kMinLimitTime)
      refuse_below("cpu time", format_duration(*o.cpu_time), format_duration(kMinLimitTime));
    l.cpu_time = *o.cpu_time;
  }
  if (o.memory) {
    if (*o.memory > p.limits.memory) refuse("memory", format_size(*o.memory), "memory", format_size(p.limits.memory));
    if (*o.memory < kMinMemoryLimit) refuse_below("memory", format_size(*o.memory), format_size(kMinMemoryLimit));
    l.cgroup.memory_bytes = *o.memory;
  }
  if (o.pids) {
    if (*o.pids > p.limits.pids) refuse("pids", std::to_string(*o.pids), "pids", std::to_string(p.limits.pids));
    if (*o.pids < kMinPids) refuse_below("pids", std::to_string(*o.pids), std::to_string(kMinPids));
    l.cgroup.pids = *o.pids;
  }
  if (o.cpus) {
    if (*o.cpus > p.limits.cpus) refuse("cpus", format_cpus(*o.cpus), "cpus", format_cpus(p.limits.cpus));
    if (!(*o.cpus >= kMinCpus)) refuse_below("cpus", format_cpus(*o.cpus), format_cpus(kMinCpus));
    l.cgroup.cpus = *o.cpus;
  }
}

}  // namespace nsbox
