#include "nsbox/profile_loader.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "nsbox/error.h"
#include "nsbox/run_spec.h"
#include "nsbox/units.h"
#include "profile_yaml.h"

namespace nsbox {

namespace {
std::string format_profile_error(const std::string& file, int line, int column, const std::string& message) {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}
}  // namespace

// A value quoted in the message may hold any character a YAML escape
// spells ("\x1b]0;..."): the error shows none that a terminal would obey.
ProfileError::ProfileError(std::string file, int line, int column, std::string message)
    : std::runtime_error(format_profile_error(printable(file), line, column, printable(message))),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(printable(message)) {}

namespace {

using profile_yaml::describe;
using profile_yaml::describe_shape;
using profile_yaml::Field;
using profile_yaml::MapReader;
using std::chrono::milliseconds;

constexpr size_t kMaxExtendsDepth = 8;
constexpr size_t kMaxNameLength = 64;
constexpr char kEmbeddedFile[] = "<embedded>";

// Ranges: wide enough for any real tenant, narrow enough to catch typos.
constexpr milliseconds kMinTime = kMinLimitTime;
constexpr milliseconds kMaxTime{24 * 3600 * 1000};
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kMinMemory = kMinMemoryLimit;
constexpr uint64_t kMinTmpfs = 1 * kMiB;
constexpr uint64_t kMaxOutput = 256 * kMiB;
constexpr uint64_t kMaxArtifacts = 100000;
constexpr uint64_t kMaxArtifactBytes = 4 * kGiB;
constexpr uint32_t kMaxId = 65534;

const std::vector<std::string> kDefaultMask = {"/proc/kcore", "/proc/sysrq-trigger", "/proc/sys", "/sys/firmware"};

// The one description of the schema: which keys each map accepts. Unknown
// key errors, profile_schema_keys() and the docs test all read it.
const profile_yaml::Schema& schema() {
  static const profile_yaml::Schema sections = {
      {"", {"name", "extends", "limits", "filesystem", "env", "seccomp", "network", "user", "fork_server"}},
      {"limits",
       {"wall_time", "cpu_time", "memory", "pids", "cpus", "tmpfs", "stdout", "stderr", "open_files", "file_size",
        "inotify_instances", "inotify_watches", "enforcement"}},
      {"filesystem", {"rootfs", "mounts", "tmpfs", "mask", "workspace"}},
      {"filesystem.mounts[]", {"source", "target", "mode", "noexec"}},
      {"filesystem.tmpfs[]", {"path", "size"}},
      {"filesystem.workspace", {"path", "max_artifacts", "max_artifact_bytes"}},
      {"seccomp", {"allow"}},
      {"network", {"mode", "allow", "deny_private", "max_connections", "max_bytes"}},
      {"network.allow[]", {"host", "cidr", "ports"}},
      {"user", {"uid", "gid"}},
  };
  return sections;
}

const std::vector<std::string_view>& keys_of(std::string_view section) {
  return profile_yaml::keys_of(schema(), section);
}

struct Origin {
  std::string file;
  YAML::Mark mark;
  std::string path;

  [[noreturn]] void fail(const std::string& message) const { profile_yaml::fail(file, mark, path + ": " + message); }
};

// The profile being assembled from its chain, oldest ancestor first, with
// where each list entry came from for the checks that need the whole.
struct Draft {
  Profile p;
  std::vector<Origin> mount_origins;  // parallel to p.mounts
  std::vector<Origin> tmpfs_origins;  // parallel to p.tmpfs
  std::vector<bool> tmpfs_sized;      // parallel to p.tmpfs: size written
  std::optional<Origin> workspace_origin;
  std::optional<Origin> fork_server_origin;
  std::map<std::string, Origin> mask_origins;  // by path, for the masks a file wrote
};

struct ParsedFile {
  std::string file;
  std::optional<MapReader> top;
  std::string name;
  std::optional<Field> extends;
};

using Setters = std::map<std::string_view, std::function<void(const Field&)>>;

// Applies each entry in file order, so the first error is the first in the file.
void apply_each(const MapReader& map, const Setters& setters) {
  for (const auto& e : map.entries()) setters.at(e.key)(e.value);
}

std::string checked_name(const Field& f) {
  std::string name = f.string();
  if (!is_valid_profile_name(name)) {
    f.fail("\"" + name +
           "\" is not a valid profile name: use lowercase letters, digits, '.', '_' and '-', "
           "starting with a letter or digit, at most 64 characters");
  }
  return name;
}

ParsedFile parse_profile(const std::string& file, const std::string& text) {
  YAML::Node root = profile_yaml::parse_document(file, text);
  if (!root.IsMap()) {
    profile_yaml::fail(file, root.Mark(), "the top level must be a map of profile keys, got " + describe_shape(root));
  }
  ParsedFile parsed{file, MapReader(Field(file, "", root, root.Mark()), keys_of("")), "", {}};
  auto name = parsed.top->get("name");
  if (!name) profile_yaml::fail(file, root.Mark(), "missing key 'name': every profile has a name");
  parsed.name = checked_name(*name);
  if (auto ext = parsed.top->get("extends")) {
    checked_name(*ext);
    parsed.extends = ext;
  }
  return parsed;
}

// ---- one layer ----

void apply_limits(const Field& f, ProfileLimits& l) {
  apply_each(MapReader(f, keys_of("limits")),
             {
                 {"wall_time", [&](const Field& v) { l.wall_time = v.duration(kMinTime, kMaxTime); }},
                 {"cpu_time", [&](const Field& v) { l.cpu_time = v.duration(kMinTime, kMaxTime); }},
                 {"memory", [&](const Field& v) { l.memory = v.size(kMinMemory, kTiB); }},
                 {"pids", [&](const Field& v) { l.pids = v.integer(kMinPids, 65536); }},
                 {"cpus", [&](const Field& v) { l.cpus = v.number(kMinCpus, 1024); }},
                 {"tmpfs", [&](const Field& v) { l.tmpfs = v.size(kMinTmpfs, kTiB); }},
                 {"stdout", [&](const Field& v) { l.stdout_bytes = v.size(0, kMaxOutput); }},
                 {"stderr", [&](const Field& v) { l.stderr_bytes = v.size(0, kMaxOutput); }},
                 {"open_files", [&](const Field& v) { l.open_files = v.integer(16, 1048576); }},
                 {"file_size", [&](const Field& v) { l.file_size = v.size(0, kTiB); }},
                 {"inotify_instances", [&](const Field& v) { l.inotify_instances = v.integer(0, 65536); }},
                 {"inotify_watches", [&](const Field& v) { l.inotify_watches = v.integer(0, 1048576); }},
                 {"enforcement",
                  [&](const Field& v) {
                    std::string s = v.string();
                    if (s == "strict") {
                      l.enforcement = Enforcement::kStrict;
                    } else if (s == "best-effort") {
                      l.enforcement = Enforcement::kBestEffort;
                    } else {
                      v.fail("expected strict or best-effort, got " + describe(v.node()));
                    }
                  }},
             });
}

// Replaces the inherited entry with the same key, else appends; returns
// the entry's index.
template <typename T, typename Key>
size_t upsert(std::vector<T>& list, std::vector<Origin>& origins, const T& value, Origin origin, Key key) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (key(list[i]) == key(value)) {
      list[i] = value;
      origins[i] = std::move(origin);
      return i;
    }
  }
  list.push_back(value);
  origins.push_back(std::move(origin));
  return list.size() - 1;
}

// Within one file a key may appear once.
void check_unique(std::map<std::string, std::string>& seen, const std::string& key, const Field& at,
                  const std::string& what, const std::string& item_path) {
  auto [it, fresh] = seen.emplace(key, item_path);
  if (!fresh) at.fail("duplicate " + what + " " + key + " (also " + it->second + ")");
}

void apply_mounts(const Field& f, Draft& d) {
  std::map<std::string, std::string> seen;
  for (const Field& item : f.items()) {
    MapReader m(item, keys_of("filesystem.mounts[]"));
    auto source = m.get("source");
    if (!source) item.fail("missing key 'source' (the host path to mount)");
    auto target = m.get("target");
    if (!target) item.fail("missing key 'target' (where it appears inside the sandbox)");
    ProfileMount mount;
    mount.source = source->host_source();
    mount.target = target->sandbox_target("mount");
    if (auto mode = m.get("mode")) {
      std::string s = mode->string();
      if (s == "ro") {
        mount.mode = MountMode::kReadOnly;
      } else if (s == "rw") {
        mount.mode = MountMode::kReadWrite;
      } else {
        mode->fail("expected ro or rw, got " + describe(mode->node()));
      }
    }
    if (auto noexec = m.get("noexec")) mount.noexec = noexec->boolean();
    check_unique(seen, mount.target, *target, "mount target", item.path());
    upsert(d.p.mounts, d.mount_origins, mount, Origin{f.file(), target->mark(), target->path()},
           [](const ProfileMount& x) { return x.target; });
  }
}

void apply_tmpfs(const Field& f, Draft& d) {
  std::map<std::string, std::string> seen;
  for (const Field& item : f.items()) {
    ProfileTmpfs tmpfs;
    bool sized = false;
    std::optional<Field> path_field;
    if (item.is_map()) {
      MapReader m(item, keys_of("filesystem.tmpfs[]"));
      path_field = m.get("path");
      if (!path_field) item.fail("missing key 'path'");
      if (auto size = m.get("size")) {
        tmpfs.size = size->size(kMinTmpfs, kTiB);
        sized = true;
      }
    } else if (item.is_scalar()) {
      path_field = item;
    } else {
      item.fail("expected a path or {path, size}, got " + describe(item.node()));
    }
    tmpfs.path = path_field->sandbox_target("tmpfs");
    check_unique(seen, tmpfs.path, *path_field, "tmpfs path", item.path());
    size_t at = upsert(d.p.tmpfs, d.tmpfs_origins, tmpfs, Origin{f.file(), path_field->mark(), path_field->path()},
                       [](const ProfileTmpfs& x) { return x.path; });
    d.tmpfs_sized.resize(d.p.tmpfs.size());
    d.tmpfs_sized[at] = sized;
  }
}

void apply_mask(const Field& f, Draft& d) {
  std::map<std::string, std::string> seen;
  for (const Field& item : f.items()) {
    std::string path = item.absolute_path();
    if (path == "/") item.fail("masking / would hide everything");
    check_unique(seen, path, item, "mask path", item.path());
    d.mask_origins[path] = Origin{item.file(), item.mark(), item.path()};
    bool inherited = false;
    for (const auto& m : d.p.mask) inherited = inherited || m == path;
    if (!inherited) d.p.mask.push_back(path);
  }
}

void apply_workspace(const Field& f, Draft& d) {
  if (f.is_plain_scalar() && !f.node().IsNull()) {
    const std::string& v = f.node().Scalar();
    if (v == "false" || v == "False" || v == "FALSE") {
      d.p.workspace.reset();
      d.workspace_origin.reset();
      return;
    }
  }
  if (!f.is_map())
    f.fail("expected a map {path, max_artifacts, max_artifact_bytes} or false, got " + describe(f.node()));
  ProfileWorkspace ws = d.p.workspace.value_or(ProfileWorkspace{});
  apply_each(MapReader(f, keys_of("filesystem.workspace")),
             {
                 {"path",
                  [&](const Field& v) {
                    ws.path = v.sandbox_target("workspace");
                    d.workspace_origin = Origin{v.file(), v.mark(), v.path()};
                  }},
                 {"max_artifacts", [&](const Field& v) { ws.max_artifacts = v.integer(0, kMaxArtifacts); }},
                 {"max_artifact_bytes", [&](const Field& v) { ws.max_artifact_bytes = v.size(0, kMaxArtifactBytes); }},
             });
  if (!d.workspace_origin) d.workspace_origin = Origin{f.file(), f.mark(), f.path() + ".path"};
  d.p.workspace = ws;
}

void apply_filesystem(const Field& f, Draft& d) {
  apply_each(MapReader(f, keys_of("filesystem")), {
                                                      {"rootfs",
                                                       [&](const Field& v) {
                                                         std::string s = v.string();
                                                         d.p.rootfs = s == "default" ? s : v.host_source();
                                                       }},
                                                      {"mounts", [&](const Field& v) { apply_mounts(v, d); }},
                                                      {"tmpfs", [&](const Field& v) { apply_tmpfs(v, d); }},
                                                      {"mask", [&](const Field& v) { apply_mask(v, d); }},
                                                      {"workspace", [&](const Field& v) { apply_workspace(v, d); }},
                                                  });
}

void apply_env(const Field& f, Draft& d) {
  MapReader env(f);
  for (const auto& e : env.entries()) {
    profile_yaml::check_env_name(Field(f.file(), e.value.path(), e.key_node, e.key_node.Mark()), e.key);
    std::string value = profile_yaml::env_value(e.value);
    if (e.key.size() + 1 + value.size() + 1 > kMaxEnvEntry)
      e.value.fail(std::to_string(e.key.size() + 1 + value.size() + 1) +
                   " bytes with its name; the kernel passes at most 128 KiB per variable, and every program of the "
                   "run would fail to start");
    d.p.env[e.key] = std::move(value);
  }
}

std::vector<std::string> syscall_list(const Field& f, const char* arch) {
  std::vector<std::string> names = profile_yaml::syscall_names(f, arch);
  if (names.empty()) f.fail("an empty allow list would deny even exit: list the system calls to allow");
  return names;
}

// `{allow: [...]}`, inline or the whole of a rule file.
void apply_seccomp_rules(const Field& f, Draft& d) {
  MapReader m(f, keys_of("seccomp"));
  auto allow = m.get("allow");
  if (!allow) f.fail("missing key 'allow' (the system calls to allow)");
  d.p.seccomp_allow = syscall_list(*allow, "x86_64");
  profile_yaml::require_execve(*allow, d.p.seccomp_allow);
  d.p.seccomp = "allow";
}

// A rule file on the host holds what the inline map holds. It is read as
// the profile loads, so `nsbox check` validates it and the resolved
// profile carries the list itself: no run reads the host file, and an edit
// of it takes effect at the next load (a node's reload), as an edit of the
// profile does. Its errors name its own lines.
void apply_seccomp_file(const Field& f, Draft& d) {
  const std::string path = f.absolute_path();
  std::string text;
  try {
    text = profile_yaml::read_file(path);
  } catch (const ProfileError& e) {
    f.fail("cannot read the rule file " + path + ": " + e.message());
  }
  const YAML::Node root = profile_yaml::parse_document(path, text);
  const Field rules(path, "seccomp", root, root.Mark());  // what the file stands for
  if (!rules.is_map()) rules.fail("a rule file holds {allow: [...]}, got " + describe_shape(root));
  apply_seccomp_rules(rules, d);
}

void apply_seccomp(const Field& f, Draft& d) {
  if (f.is_map()) return apply_seccomp_rules(f, d);
  const std::string s = f.is_scalar() ? f.string() : "";
  if (s == "default" || s == "strict") {
    d.p.seccomp = s;
    d.p.seccomp_allow.clear();
    return;
  }
  if (!s.starts_with('/')) {
    f.fail("expected default, strict, the absolute path of a rule file or {allow: [...]}, got " + describe(f.node()));
  }
  apply_seccomp_file(f, d);
}

EgressRule egress_rule(const Field& item) {
  MapReader m(item, keys_of("network.allow[]"));
  auto host = m.get("host");
  auto cidr = m.get("cidr");
  if (!host == !cidr) item.fail("a rule names exactly one of host (a DNS name or *.domain) or cidr (an address range)");
  EgressRule rule;
  try {
    if (host) {
      rule.host = normalize_host(host->text());
      validate_host_pattern(rule.host);
    } else {
      rule.cidr = parse_cidr(cidr->text());
    }
  } catch (const std::invalid_argument& e) {
    (host ? *host : *cidr).fail(e.what());
  }
  auto ports = m.get("ports");
  if (!ports) item.fail("missing key 'ports' (the ports this rule allows, e.g. [443])");
  for (const Field& p : ports->items()) {
    auto port = static_cast<uint16_t>(p.integer(1, 65535));
    if (!rule.allows_port(port)) rule.ports.push_back(port);
  }
  if (rule.ports.empty()) ports->fail("a rule needs at least one port");
  return rule;
}

void apply_network(const Field& f, Draft& d) {
  MapReader m(f, keys_of("network"));
  EgressPolicy& e = d.p.egress;
  if (auto mode = m.get("mode")) {
    std::string s = mode->string();
    if (s == "none") {
      d.p.network = NetworkMode::kNone;
      e = EgressPolicy{};  // nothing inherited stays granted
    } else if (s == "egress") {
      d.p.network = NetworkMode::kEgress;
    } else {
      mode->fail("expected none (loopback only) or egress (through nsbox's proxy), got " + describe(mode->node()));
    }
  }
  const bool egress = d.p.network == NetworkMode::kEgress;
  auto needs_egress = [&](const Field& v) {
    if (!egress) v.fail("only applies with mode: egress");
  };
  if (auto allow = m.get("allow")) {
    needs_egress(*allow);
    e.allow.clear();
    for (const Field& item : allow->items()) e.allow.push_back(egress_rule(item));
  }
  if (auto v = m.get("deny_private")) {
    needs_egress(*v);
    e.deny_private = v->boolean();
  }
  if (auto v = m.get("max_connections")) {
    needs_egress(*v);
    e.max_connections = v->integer(1, kMaxEgressConnections);
  }
  if (auto v = m.get("max_bytes")) {
    needs_egress(*v);
    e.max_bytes = v->size(1, kTiB);
  }
}

uint32_t sandbox_id(const Field& v, const char* root_message) {
  uint64_t id = v.integer(0, UINT64_MAX);
  if (id == 0) v.fail(root_message);
  if (id > kMaxId) v.fail(std::to_string(id) + " is out of range 1..65534");
  return static_cast<uint32_t>(id);
}

// fork_server: true (both languages), false, or a list of languages.
Profile::ForkServer fork_server_languages(const Field& f) {
  Profile::ForkServer out;
  if (!f.is_list()) {
    const std::optional<bool> on = f.maybe_boolean();
    if (!on) f.fail("expected true, false or a list of languages (python, javascript), got " + describe(f.node()));
    return {*on, *on};
  }
  for (const Field& item : f.items()) {
    const std::string name = item.text();
    bool& chosen = name == "python" ? out.python : out.javascript;
    if (name != "python" && name != "javascript")
      item.fail("expected python or javascript, got " + describe(item.node()));
    if (chosen) item.fail("duplicate language " + name);
    chosen = true;
  }
  return out;
}

void apply_user(const Field& f, Draft& d) {
  apply_each(
      MapReader(f, keys_of("user")),
      {
          {"uid", [&](const Field& v) { d.p.uid = sandbox_id(v, "the sandbox user must not be root inside (uid 0)"); }},
          {"gid",
           [&](const Field& v) { d.p.gid = sandbox_id(v, "the sandbox group must not be root's inside (gid 0)"); }},
      });
}

void apply_layer(const ParsedFile& layer, Draft& d) {
  d.p.name = layer.name;
  auto skip = [](const Field&) {};
  apply_each(*layer.top, {
                             {"name", skip},
                             {"extends", skip},
                             {"limits", [&](const Field& v) { apply_limits(v, d.p.limits); }},
                             {"filesystem", [&](const Field& v) { apply_filesystem(v, d); }},
                             {"env", [&](const Field& v) { apply_env(v, d); }},
                             {"seccomp", [&](const Field& v) { apply_seccomp(v, d); }},
                             {"network", [&](const Field& v) { apply_network(v, d); }},
                             {"user", [&](const Field& v) { apply_user(v, d); }},
                             {"fork_server",
                              [&](const Field& v) {
                                d.p.fork_server = fork_server_languages(v);
                                d.fork_server_origin = Origin{v.file(), v.mark(), v.path()};
                              }},
                         });
}

// ---- the whole ----

void apply_tmpfs_defaults(Draft& d) {
  for (size_t i = 0; i < d.p.tmpfs.size(); ++i) {
    if (!d.tmpfs_sized[i]) d.p.tmpfs[i].size = d.p.limits.tmpfs;
  }
  for (const auto& t : d.p.tmpfs) {
    if (t.path == "/tmp") return;
  }
  d.p.tmpfs.insert(d.p.tmpfs.begin(), ProfileTmpfs{"/tmp", d.p.limits.tmpfs});
  d.tmpfs_origins.insert(d.tmpfs_origins.begin(), Origin{});
  d.tmpfs_sized.insert(d.tmpfs_sized.begin(), false);
}

void apply_mask_defaults(Draft& d) {
  std::vector<std::string> mask = kDefaultMask;
  for (const auto& m : d.p.mask) {
    if (std::find(mask.begin(), mask.end(), m) == mask.end()) mask.push_back(m);
  }
  d.p.mask = std::move(mask);
}

// The fork server forks warm runs of the languages it names; what it cannot give
// a run is refused here rather than at the first run.
void check_fork_server(const Draft& d) {
  if (!d.p.fork_server.any()) return;
  if (d.p.network == NetworkMode::kEgress)
    d.fork_server_origin->fail(
        "cannot be combined with network mode egress: the egress proxy is per sandbox, "
        "and the fork server's runs share none");
  // Each forked run mounts these afresh, which would hide a bind below them.
  std::vector<std::string> fresh = {"/tmp", "/dev/shm"};
  for (const auto& t : d.p.tmpfs) fresh.push_back(t.path);
  if (d.p.workspace) fresh.push_back(d.p.workspace->path);
  for (size_t i = 0; i < d.p.mounts.size(); ++i)
    for (const auto& f : fresh)
      if (d.p.mounts[i].target.rfind(f + "/", 0) == 0)
        d.mount_origins[i].fail("lies under " + f +
                                ", which each run of a fork server (fork_server: true) mounts "
                                "afresh, hiding this mount");
  for (const auto& m : d.p.mask)
    for (const auto& f : fresh)
      if (m == f || m.rfind(f + "/", 0) == 0)
        d.fork_server_origin->fail("cannot keep the mask on " + m + ": each forked run mounts " + f +
                                   " afresh, uncovering it");
}

// Two things mounted on the same place inside: the later hides the earlier.
void check_collisions(const Draft& d) {
  const auto& ws = d.p.workspace;
  for (size_t i = 0; i < d.p.mounts.size(); ++i) {
    const std::string& target = d.p.mounts[i].target;
    for (const auto& t : d.p.tmpfs) {
      if (t.path == target) d.mount_origins[i].fail(target + " is also a tmpfs (filesystem.tmpfs)");
    }
    if (ws && ws->path == target) {
      d.mount_origins[i].fail(target + " is also the workspace (filesystem.workspace.path)");
    }
  }
  for (const auto& t : d.p.tmpfs) {
    if (ws && ws->path == t.path) {
      d.workspace_origin->fail(t.path + " is also a tmpfs (filesystem.tmpfs)");
    }
  }
}

// A mount point (or masked path) inside a host directory bound rw must stay
// where it is: a run could move a directory above it (not the mount point
// itself, which is busy), and every later run would fail to find it, or
// see what the mask hid. Directly inside the bind, the only directory above
// it is the bind's own root. Depth is counted from the nearest mount above
// (a mount point in between cannot be moved either).
void check_mount_points_in_writable_binds(const Draft& d) {
  struct Place {
    const std::string& target;
    bool rw_host_directory;
  };
  std::vector<Place> places;
  for (const auto& m : d.p.mounts) places.push_back({m.target, m.mode == MountMode::kReadWrite});
  for (const auto& t : d.p.tmpfs) places.push_back({t.path, false});
  if (d.p.workspace) places.push_back({d.p.workspace->path, false});
  auto check = [&](const std::string& target, const Origin& origin) {
    const Place* nearest = nullptr;
    for (const auto& p : places)
      if (target.rfind(p.target + "/", 0) == 0 && (!nearest || p.target.size() > nearest->target.size())) nearest = &p;
    if (!nearest || !nearest->rw_host_directory) return;
    const std::string& rw = nearest->target;
    const std::string below = target.substr(rw.size() + 1);
    if (below.find('/') == std::string::npos) return;
    origin.fail("lies more than one level inside " + rw + ", a host directory mounted rw: a run could move " + rw +
                "/" + below.substr(0, below.find('/')) + " and every later run would lose it; put it directly inside " +
                rw + " or mount " + rw + " ro");
  };
  for (size_t i = 0; i < d.p.mounts.size(); ++i) check(d.p.mounts[i].target, d.mount_origins[i]);
  for (size_t i = 0; i < d.p.tmpfs.size(); ++i)
    if (!d.tmpfs_origins[i].file.empty()) check(d.p.tmpfs[i].path, d.tmpfs_origins[i]);
  if (d.p.workspace && d.workspace_origin) check(d.p.workspace->path, *d.workspace_origin);
  for (const auto& [path, origin] : d.mask_origins) check(path, origin);
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// The file for a profile name: <dir>/<name>.yaml in search order, else the
// built-in default. Returns {file label, text} or nullopt.
std::optional<std::pair<std::string, std::string>> find_named(const std::string& name, const ProfileSearch& search) {
  for (const auto& dir : search.dirs) {
    std::string path = (std::filesystem::path(dir) / (name + ".yaml")).string();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return std::make_pair(path, profile_yaml::read_file(path));
  }
  if (name == "default") return std::make_pair(std::string(kEmbeddedFile), embedded_default_profile());
  return std::nullopt;
}

std::string not_found_message(const std::string& name, const ProfileSearch& search) {
  return "profile '" + name + "' not found: no " + name + ".yaml in " +
         (search.dirs.empty() ? std::string("(no directories to search)") : join(search.dirs, ", "));
}

std::vector<ParsedFile> resolve_chain(ParsedFile top, const ProfileSearch& search) {
  std::vector<ParsedFile> chain;
  chain.push_back(std::move(top));
  while (chain.back().extends) {
    const Field& ext = *chain.back().extends;
    const std::string parent = ext.string();
    std::vector<std::string> names;
    for (const auto& c : chain) names.push_back(c.name);
    if (std::find(names.begin(), names.end(), parent) != names.end()) {
      ext.fail("cycle: " + join(names, " -> ") + " -> " + parent);
    }
    if (chain.size() > kMaxExtendsDepth) {
      ext.fail("chain longer than " + std::to_string(kMaxExtendsDepth) + ": " + join(names, " -> ") + " -> " + parent);
    }
    auto found = find_named(parent, search);
    if (!found) ext.fail(not_found_message(parent, search));
    ParsedFile p = parse_profile(found->first, found->second);
    if (p.name != parent) {
      p.top->get("name")->fail("'" + p.name + "' does not match the file name: a profile found as '" + parent +
                               "' must be named '" + parent + "'");
    }
    chain.push_back(std::move(p));
  }
  return chain;
}

Profile resolve(ParsedFile top, const ProfileSearch& search) {
  std::vector<ParsedFile> chain = resolve_chain(std::move(top), search);
  Draft d;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) apply_layer(*it, d);
  apply_tmpfs_defaults(d);
  apply_mask_defaults(d);
  check_collisions(d);
  check_mount_points_in_writable_binds(d);
  check_fork_server(d);
  d.p.source_file = chain.front().file;
  for (size_t i = 1; i < chain.size(); ++i) d.p.inheritance.push_back(chain[i].name);
  return std::move(d.p);
}

}  // namespace

bool is_valid_profile_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_or_digit(name[0])) return false;
  for (char c : name) {
    if (!lower_or_digit(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

const std::string& embedded_default_profile() {
  static const std::string text =
#include "nsbox_default_profile.inc"
      ;
  return text;
}

ProfileSearch default_profile_search(const std::string& argv0_dir) {
  ProfileSearch search;
  if (const char* env = std::getenv("NSBOX_PROFILE_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) search.dirs.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  search.dirs.push_back("/etc/nsbox/profiles");
  search.dirs.push_back(NSBOX_DATADIR "/profiles");  // cmake --install puts the shipped ones here
  if (!argv0_dir.empty()) {
    search.dirs.push_back((std::filesystem::path(argv0_dir) / ".." / "profiles").lexically_normal().string());
  }
  return search;
}

Profile load_profile_text(const std::string& text, const std::string& file, const ProfileSearch& search) {
  return resolve(parse_profile(file, text), search);
}

Profile load_profile_file(const std::string& path, const ProfileSearch& search) {
  return load_profile_text(profile_yaml::read_file(path), path, search);
}

Profile load_profile(const std::string& name_or_path, const ProfileSearch& search) {
  const std::string& v = name_or_path;
  bool is_path = v.find('/') != std::string::npos || (v.size() >= 5 && v.compare(v.size() - 5, 5, ".yaml") == 0);
  if (is_path) return load_profile_file(v, search);
  if (!is_valid_profile_name(v)) {
    throw std::invalid_argument("\"" + v +
                                "\" is neither a profile name ([a-z0-9][a-z0-9._-]*) nor a path "
                                "(containing '/' or ending in .yaml)");
  }
  auto found = find_named(v, search);
  if (!found) throw std::invalid_argument(not_found_message(v, search));
  ParsedFile parsed = parse_profile(found->first, found->second);
  if (parsed.name != v) {
    parsed.top->get("name")->fail("'" + parsed.name + "' does not match the file name: a profile found as '" + v +
                                  "' must be named '" + v + "'");
  }
  return resolve(std::move(parsed), search);
}

const std::vector<std::string>& profile_schema_keys() {
  static const std::vector<std::string> keys = profile_yaml::dotted_keys(schema());
  return keys;
}

// ---- printing ----

namespace {

void emit_limits(YAML::Emitter& out, const ProfileLimits& l) {
  out << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "wall_time" << YAML::Value << format_duration(l.wall_time);
  out << YAML::Key << "cpu_time" << YAML::Value << format_duration(l.cpu_time);
  out << YAML::Key << "memory" << YAML::Value << format_size(l.memory);
  out << YAML::Key << "pids" << YAML::Value << l.pids;
  out << YAML::Key << "cpus" << YAML::Value << profile_yaml::format_number(l.cpus);
  out << YAML::Key << "tmpfs" << YAML::Value << format_size(l.tmpfs);
  out << YAML::Key << "stdout" << YAML::Value << format_size(l.stdout_bytes);
  out << YAML::Key << "stderr" << YAML::Value << format_size(l.stderr_bytes);
  out << YAML::Key << "open_files" << YAML::Value << l.open_files;
  out << YAML::Key << "file_size" << YAML::Value << format_size(l.file_size);
  out << YAML::Key << "inotify_instances" << YAML::Value << l.inotify_instances;
  out << YAML::Key << "inotify_watches" << YAML::Value << l.inotify_watches;
  out << YAML::Key << "enforcement" << YAML::Value
      << (l.enforcement == Enforcement::kStrict ? "strict" : "best-effort");
  out << YAML::EndMap;
}

void emit_filesystem(YAML::Emitter& out, const Profile& p) {
  out << YAML::Key << "filesystem" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "rootfs" << YAML::Value << p.rootfs;
  out << YAML::Key << "mounts" << YAML::Value;
  if (p.mounts.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const auto& m : p.mounts) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "source" << YAML::Value << m.source << YAML::Key << "target"
        << YAML::Value << m.target << YAML::Key << "mode" << YAML::Value
        << (m.mode == MountMode::kReadOnly ? "ro" : "rw") << YAML::Key << "noexec" << YAML::Value << m.noexec
        << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "tmpfs" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : p.tmpfs) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << t.path << YAML::Key << "size"
        << YAML::Value << format_size(t.size) << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "mask" << YAML::Value << YAML::BeginSeq;
  for (const auto& m : p.mask) out << m;
  out << YAML::EndSeq;
  out << YAML::Key << "workspace" << YAML::Value;
  if (!p.workspace) {
    out << false;
  } else {
    out << YAML::BeginMap << YAML::Key << "path" << YAML::Value << p.workspace->path << YAML::Key << "max_artifacts"
        << YAML::Value << p.workspace->max_artifacts << YAML::Key << "max_artifact_bytes" << YAML::Value
        << format_size(p.workspace->max_artifact_bytes) << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void emit_env(YAML::Emitter& out, const std::map<std::string, std::string>& env) {
  out << YAML::Key << "env" << YAML::Value;
  if (env.empty()) out << YAML::Flow;
  out << YAML::BeginMap;
  for (const auto& [k, v] : env) out << YAML::Key << k << YAML::Value << YAML::DoubleQuoted << v;
  out << YAML::EndMap;
}

void emit_seccomp(YAML::Emitter& out, const Profile& p) {
  out << YAML::Key << "seccomp" << YAML::Value;
  if (p.seccomp_allow.empty()) {
    out << p.seccomp;
    return;
  }
  out << YAML::BeginMap << YAML::Key << "allow" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : p.seccomp_allow) out << s;
  out << YAML::EndSeq << YAML::EndMap;
}

void emit_network(YAML::Emitter& out, const Profile& p) {
  out << YAML::Key << "network" << YAML::Value << YAML::BeginMap << YAML::Key << "mode" << YAML::Value
      << (p.network == NetworkMode::kEgress ? "egress" : "none");
  if (p.network == NetworkMode::kEgress) {
    const EgressPolicy& e = p.egress;
    out << YAML::Key << "allow" << YAML::Value << YAML::BeginSeq;
    for (const auto& rule : e.allow) {
      out << YAML::Flow << YAML::BeginMap;
      if (rule.cidr) {
        out << YAML::Key << "cidr" << YAML::Value << rule.cidr->str();
      } else {
        out << YAML::Key << "host" << YAML::Value << rule.host;
      }
      out << YAML::Key << "ports" << YAML::Value << YAML::Flow << rule.ports << YAML::EndMap;
    }
    out << YAML::EndSeq;
    out << YAML::Key << "deny_private" << YAML::Value << e.deny_private;
    out << YAML::Key << "max_connections" << YAML::Value << e.max_connections;
    out << YAML::Key << "max_bytes" << YAML::Value << format_size(e.max_bytes);
  }
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const Profile& p) {
  YAML::Emitter out;
  out.SetIndent(2);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << p.name;
  emit_limits(out, p.limits);
  emit_filesystem(out, p);
  emit_env(out, p.env);
  emit_seccomp(out, p);
  emit_network(out, p);
  if (p.fork_server.python && p.fork_server.javascript) {
    out << YAML::Key << "fork_server" << YAML::Value << true;
  } else if (p.fork_server.any()) {
    out << YAML::Key << "fork_server" << YAML::Value << YAML::Flow << YAML::BeginSeq
        << (p.fork_server.python ? "python" : "javascript") << YAML::EndSeq;
  }
  out << YAML::Key << "user" << YAML::Value << YAML::BeginMap << YAML::Key << "uid" << YAML::Value << p.uid << YAML::Key
      << "gid" << YAML::Value << p.gid << YAML::EndMap;
  out << YAML::EndMap;
  std::string header = "# profile " + p.name;
  if (!p.source_file.empty()) header += ", resolved from " + p.source_file;
  if (!p.inheritance.empty()) header += "; extends " + join(p.inheritance, " -> ");
  return header + "\n" + out.c_str() + "\n";
}

}  // namespace nsbox
