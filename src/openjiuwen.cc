// Migration from openJiuwen's sandbox_config.yaml, the configuration of its
// bubblewrap gateway. The result is the `default` profile with the platform's
// syscall allow list, mounts, environment and timeout. Whatever nsbox cannot
// honour (a shared namespace, a device mount, an unknown bwrap option) is
// refused with the position, never dropped silently.
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "nsbox/profile_loader.h"
#include "profile_yaml.h"

namespace nsbox {
namespace {

using profile_yaml::describe;
using profile_yaml::describe_shape;
using profile_yaml::Field;
using profile_yaml::MapReader;

struct Section {
  std::string_view path;
  std::vector<std::string_view> keys;
};

const std::vector<Section>& schema() {
  static const std::vector<Section> sections = {
      {"", {"seccomp", "namespace", "mount", "sandbox", "interpreter", "environment", "timeout", "options"}},
      {"seccomp", {"allow"}},
      {"seccomp.allow", {"x86_64", "aarch64"}},
      {"namespace", {"user", "net", "pid", "ipc", "uts", "cgroup"}},
      {"mount[]", {"src", "dst", "mode"}},
      {"sandbox", {"type", "path"}},
      {"interpreter", {"python_path", "javascript_path", "node_path"}},
  };
  return sections;
}

const std::vector<std::string_view>& keys_of(std::string_view section) {
  for (const auto& s : schema()) {
    if (s.path == section) return s.keys;
  }
  throw std::logic_error("no sandbox_config section " + std::string(section));
}

// The device nodes every nsbox sandbox has; `dev` mounts of them are dropped.
const std::set<std::string> kProvidedDevices = {"/dev/null",   "/dev/zero",    "/dev/full",
                                                "/dev/random", "/dev/urandom", "/dev/tty"};

// bwrap options that repeat what nsbox always does, with their argument.
const std::map<std::string, std::string> kEquivalentOptions = {
    {"--proc", "/proc"},        {"--dev", "/dev"},        {"--tmpfs", "/tmp"},          {"--cap-drop", "ALL"},
    {"--die-with-parent", ""},  {"--new-session", ""},    {"--unshare-all", ""},        {"--unshare-user", ""},
    {"--unshare-user-try", ""}, {"--unshare-ipc", ""},    {"--unshare-pid", ""},        {"--unshare-net", ""},
    {"--unshare-uts", ""},      {"--unshare-cgroup", ""}, {"--unshare-cgroup-try", ""}, {"--clearenv", ""},
};

constexpr double kMaxTimeoutSeconds = 86400;
constexpr long long kMinTimeoutMs = 10;

std::vector<std::string> syscalls(const Field& f, const char* arch) { return profile_yaml::syscall_names(f, arch); }

// The platform filters with the allow list of the host's architecture and
// loads no filter when the list is empty; nsbox profiles carry the x86_64
// list, the aarch64 one is only checked.
void migrate_seccomp(const Field& f, Profile& p) {
  MapReader seccomp(f, keys_of("seccomp"));
  auto allow = seccomp.get("allow");
  if (!allow) return;
  MapReader lists(*allow, keys_of("seccomp.allow"));
  if (auto arm = lists.get("aarch64")) syscalls(*arm, "aarch64");
  if (auto x86 = lists.get("x86_64")) {
    auto names = syscalls(*x86, "x86_64");
    if (!names.empty()) {
      profile_yaml::require_execve(*x86, names);
      p.seccomp_allow = std::move(names);
      p.seccomp = "allow";
    }
  }
}

[[noreturn]] void refuse_shared_namespace(const Field& where, const std::string& ns, bool absent) {
  // An absent key is reported at its map, without the map's path in front.
  const Field at = absent ? Field(where.file(), "", where.node(), where.mark()) : where;
  std::string what = absent ? "namespace." + ns + " is absent, which the platform reads as false: it " : "false ";
  if (ns == "net") {
    at.fail(what +
            "would share the host's network with the sandbox; nsbox always gives a sandbox its own "
            "network namespace, and what it may reach is the profile's network section (mode none, or "
            "egress through nsbox's proxy with an allow list): set net: True to migrate");
  }
  at.fail(what + "would share the host's " + ns + " namespace; nsbox always creates it: set " + ns + ": True");
}

// bwrap unshares only the namespaces set to true; nsbox unshares all of them.
void check_namespaces(const std::optional<Field>& f, const Field& root) {
  std::set<std::string> present;
  if (f) {
    MapReader ns(*f, keys_of("namespace"));
    for (const auto& e : ns.entries()) {
      if (!e.value.boolean()) refuse_shared_namespace(e.value, e.key, false);
      present.insert(e.key);
    }
  }
  for (const char* ns : {"net", "user", "pid", "ipc", "uts", "cgroup"}) {
    if (!present.count(ns)) refuse_shared_namespace(f ? *f : root, ns, true);
  }
}

// Host system directories the platform binds read-only so that bubblewrap,
// which runs on the host's root, finds python3 and node. nsbox's rootfs has
// its own runtimes: binding the host's over them would mix two systems (and
// /lib, /lib64 are symlinks on merged-/usr hosts, which nsbox refuses as
// mount sources). Read-only mounts of these, at the same path, are dropped.
// clang-format off
const std::set<std::string> kRootfsProvided = {
    "/lib",          "/lib64",         "/lib32",           "/bin",           "/sbin",
    "/usr/bin",      "/usr/sbin",      "/usr/lib",         "/usr/lib64",     "/usr/lib32",
    "/usr/local/bin", "/usr/local/lib", "/usr/share/nodejs", "/etc/resolv.conf", "/etc/ssl/certs",
};
// clang-format on

// The host's programs, libraries and settings: /usr, /etc, /boot and the
// top-level program and library directories, and anything below them.
bool is_host_system_path(const std::string& path) {
  const std::string clean = std::filesystem::path(path).lexically_normal().string();
  for (const char* top : {"/usr", "/etc", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}) {
    const std::string t = top;
    if (clean == t || clean.rfind(t + "/", 0) == 0) return true;
  }
  return clean == "/";
}

bool is_provided_device(const std::string& src, const std::string& dst) {
  return src == dst && kProvidedDevices.count(dst) > 0;
}

void check_not_reserved(const Field& dst_field, const std::string& dst, const Profile& p) {
  for (const auto& t : p.tmpfs) {
    if (t.path == dst) dst_field.fail(dst + " is a tmpfs in every nsbox sandbox");
  }
  if (p.workspace && p.workspace->path == dst) {
    dst_field.fail(dst + " is the workspace of the default profile (filesystem.workspace.path)");
  }
}

void migrate_mounts(const Field& f, Profile& p) {
  std::map<std::string, std::string> seen;
  for (const Field& item : f.items()) {
    MapReader m(item, keys_of("mount[]"));
    auto src = m.get("src");
    auto dst = m.get("dst");
    auto mode = m.get("mode");
    if (!src || !dst || !mode) item.fail("expected {src, dst, mode}, got " + describe(item.node()));
    std::string how = mode->string();
    if (how == "dev") {
      if (is_provided_device(src->string(), dst->string())) continue;
      mode->fail(
          "a device mount (mode dev) is not supported: nsbox gives every sandbox /dev/null, "
          "/dev/zero, /dev/full, /dev/random, /dev/urandom and /dev/tty, and no other device");
    }
    if (how != "read" && how != "write") {
      mode->fail("expected read, write or dev, got " + describe(mode->node()));
    }
    ProfileMount mount;
    mount.target = dst->sandbox_target("mount");
    auto [it, fresh] = seen.emplace(mount.target, item.path());
    if (!fresh) dst->fail("duplicate mount target " + mount.target + " (also " + it->second + ")");
    if (how == "read" && src->string() == dst->string() && kRootfsProvided.count(mount.target)) continue;
    // A writable bind of the host's system files, wherever it goes, lets
    // every run change them (as far as the sandbox user may).
    if (how == "write" && is_host_system_path(src->string()))
      mode->fail("mode write of " + src->string() +
                 ", the host's system files: runs could change them (give a directory of its own for data)");
    mount.source = src->host_source();
    mount.mode = how == "read" ? MountMode::kReadOnly : MountMode::kReadWrite;
    check_not_reserved(*dst, mount.target, p);
    std::erase_if(p.mounts, [&](const ProfileMount& x) { return x.target == mount.target; });
    p.mounts.push_back(mount);
  }
}

void check_sandbox(const Field& f) {
  MapReader m(f, keys_of("sandbox"));
  if (auto type = m.get("type"); type && type->string() != "bubblewrap") {
    type->fail("expected bubblewrap (the only type the platform has), got " + describe(type->node()));
  }
  if (auto path = m.get("path")) path->string();
}

// nsbox runs the rootfs's python3 and node; the paths only need to be strings.
void check_interpreter(const Field& f) {
  MapReader m(f, keys_of("interpreter"));
  for (const auto& e : m.entries()) e.value.string();
}

void migrate_environment(const Field& f, Profile& p) {
  MapReader env(f);
  for (const auto& e : env.entries()) {
    profile_yaml::check_env_name(Field(f.file(), e.value.path(), e.key_node, e.key_node.Mark()), e.key);
    p.env[e.key] = profile_yaml::env_value(e.value);
  }
}

// Seconds, as the platform's Popen timeout; 0 means the platform's default
// (none), which keeps the default profile's limit. CPU time gets the same
// bound: the platform had no CPU limit of its own.
void migrate_timeout(const Field& f, Profile& p) {
  double seconds = f.number(0, kMaxTimeoutSeconds);
  if (seconds == 0) return;
  auto ms = std::llround(seconds * 1000);
  if (ms < kMinTimeoutMs) f.fail(f.node().Scalar() + " is shorter than 10ms");
  p.limits.wall_time = std::chrono::milliseconds(ms);
  p.limits.cpu_time = std::chrono::milliseconds(ms);
}

void check_options(const Field& f) {
  auto items = f.items();
  for (size_t i = 0; i < items.size(); ++i) {
    std::string option = items[i].text();
    auto known = kEquivalentOptions.find(option);
    if (known == kEquivalentOptions.end()) {
      items[i].fail("bwrap option \"" + option +
                    "\" has no nsbox equivalent: only options that repeat what nsbox always does "
                    "are accepted (--proc /proc, --dev /dev, --tmpfs /tmp, --unshare-*, "
                    "--die-with-parent, --new-session, --cap-drop ALL, --clearenv)");
    }
    if (known->second.empty()) continue;
    if (i + 1 == items.size()) items[i].fail("bwrap option " + option + " needs an argument");
    const Field& arg = items[++i];
    if (arg.text() != known->second) {
      arg.fail("nsbox always has " + option + " " + known->second + ", got " + describe(arg.node()));
    }
  }
}

}  // namespace

Profile load_openjiuwen_config(const std::string& path, const ProfileSearch& search) {
  std::string text = profile_yaml::read_file(path);
  YAML::Node root = profile_yaml::parse_document(path, text);
  Field root_field(path, "", root, root.Mark());
  if (!root.IsMap()) {
    root_field.fail("the top level must be a map of sandbox_config.yaml keys, got " + describe_shape(root));
  }
  MapReader top(root_field, keys_of(""));
  Profile p = load_profile("default", search);
  p.name = "openjiuwen";
  p.source_file = path;
  p.inheritance = {"default"};
  std::optional<Field> namespaces;
  for (const auto& e : top.entries()) {
    const Field& v = e.value;
    if (e.key == "seccomp") migrate_seccomp(v, p);
    if (e.key == "namespace") check_namespaces(namespaces = v, root_field);
    if (e.key == "mount") migrate_mounts(v, p);
    if (e.key == "sandbox") check_sandbox(v);
    if (e.key == "interpreter") check_interpreter(v);
    if (e.key == "environment") migrate_environment(v, p);
    if (e.key == "timeout") migrate_timeout(v, p);
    if (e.key == "options") check_options(v);
  }
  if (!namespaces) check_namespaces(std::nullopt, root_field);
  return p;
}

const std::vector<std::string>& openjiuwen_schema_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& s : schema()) {
      for (auto k : s.keys) {
        out.push_back(s.path.empty() ? std::string(k) : std::string(s.path) + "." + std::string(k));
      }
    }
    return out;
  }();
  return keys;
}

}  // namespace nsbox
