#include "nsbox/node_config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "nsbox/digest.h"
#include "nsbox/egress_policy.h"
#include "nsbox/fork_server.h"
#include "nsbox/profile_apply.h"
#include "nsbox/runtime.h"
#include "profile_yaml.h"

namespace nsbox {
namespace {

using profile_yaml::Field;
using profile_yaml::MapReader;
using std::chrono::milliseconds;

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr uint32_t kMaxConcurrent = 4096;
constexpr uint64_t kMaxPoolSize = 64;  // warm sandboxes per tenant and language
constexpr uint32_t kMaxQueue = 65536;
constexpr size_t kMaxTenantNameLength = 64;

// The one description of which keys each map accepts.
const profile_yaml::Schema& schema() {
  static const profile_yaml::Schema sections = {
      {"",
       {"listeners", "tenants", "default_tenant", "limits", "audit_log", "log_level", "cors", "cgroup_parent",
        "metrics"}},
      {"listeners[]", {"address", "language", "tenant"}},
      {"tenants[]", {"name", "token", "token_file", "profile", "max_requests"}},
      {"limits",
       {"max_concurrent", "queue_depth", "body_limit", "client_timeout", "request_timeout", "grace_period",
        "answer_grace", "pool_size", "pool_memory"}},
      {"cors", {"allow_origins"}},
      {"metrics", {"token", "token_file"}},
  };
  return sections;
}

const std::vector<std::string_view>& keys_of(std::string_view section) {
  return profile_yaml::keys_of(schema(), section);
}

uint32_t online_cpus() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<uint32_t>(n) : 1;
}

bool is_valid_tenant_name(const std::string& name) {
  return is_valid_profile_name(name) && name.size() <= kMaxTenantNameLength;
}

// What a byte that cannot be in a token is, for an error that must not
// quote the token.
std::string describe_bad_token_byte(unsigned char c) {
  if (c == ' ') return "a space";
  if (c == '\n') return "a line break";
  if (c < 0x20 || c == 0x7f) return "a control character";
  return "a byte beyond ASCII";
}

// Tokens travel in an HTTP header: visible ASCII only, long enough not to be
// guessed. `where` names a token file ("" for a token in the config).
std::string check_token(const Field& at, std::string token, const std::string& where = "") {
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (!where.empty() && token.find('\n') != std::string::npos)
    at.fail(where + " holds more than one line: it must hold the token alone");
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength)
    at.fail((where.empty() ? "a token" : "the token in " + where) + " must have 16 to 4096 characters, this one has " +
            std::to_string(token.size()));
  for (size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c <= 0x20 || c >= 0x7f)
      at.fail((where.empty() ? "a token" : "the token in " + where) +
              " may only contain visible ASCII characters: character " + std::to_string(i + 1) + " of " +
              std::to_string(token.size()) + " is " + describe_bad_token_byte(c));
    // The node refuses a % in an Authorization header (a proxy in front may
    // read it percent-decoded): such a token could never be sent.
    if (c == '%')
      at.fail((where.empty() ? "a token" : "the token in " + where) + " may not contain %: character " +
              std::to_string(i + 1) + " of " + std::to_string(token.size()) +
              " is one, and the node refuses a % in an Authorization header");
  }
  return token;
}

// A token file holds a secret: it must be a regular file nobody but its
// owner can read or write.
std::string read_token_file(const Field& at, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) at.fail("cannot read token file " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) at.fail("token file " + path + " is not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    at.fail("token file " + path + " is accessible to group or others (mode " + std::to_string((st.st_mode >> 6) & 7) +
            std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) + "); chmod 600 it");
  std::string text;
  try {
    text = profile_yaml::read_file(path);
  } catch (const ProfileError& e) {
    at.fail(e.message());
  }
  return check_token(at, std::move(text), "token file " + path);
}

std::string relative_to(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return (std::filesystem::path(dir) / path).lexically_normal().string();
}

// A map's `token` or `token_file` (one of them, or neither: "").
std::string read_token_or_token_file(const MapReader& map, const std::string& dir) {
  auto token = map.get("token");
  auto token_file = map.get("token_file");
  if (token && token_file) token_file->fail("give either token or token_file, not both");
  if (token) return check_token(*token, token->text());
  if (token_file) return read_token_file(*token_file, relative_to(dir, token_file->text()));
  return "";
}

bool is_profile_path(const std::string& ref) {
  return ref.find('/') != std::string::npos || (ref.size() >= 5 && ref.compare(ref.size() - 5, 5, ".yaml") == 0);
}

Profile load_tenant_profile(const Field& at, const std::string& ref, const std::string& dir,
                            const ProfileSearch& search) {
  try {
    if (is_profile_path(ref)) return load_profile_file(relative_to(dir, ref), search);
    return load_profile(ref, search);
  } catch (const ProfileError& e) {
    at.fail("profile " + ref + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    at.fail(e.what());
  }
}

// A profile whose forked runs' settings exceed what a fork request carries
// would fail every such run: refused with the tenant instead. capacity is
// fork_request_capacity(), found once per config.
void check_fork_requests(const Field& at, const std::string& ref, const Profile& profile, size_t capacity) {
  for (Language language : {Language::kPython, Language::kJavaScript}) {
    if (!forks(profile, language)) continue;
    const size_t bytes = largest_fork_request_bytes(exec_spec(spec_from_profile(profile), language));
    if (bytes > kMaxForkRequestBytes)
      at.fail("profile " + ref + ": with fork_server, a " + to_string(language) + " run's settings (" +
              std::to_string(bytes) + " bytes: env, tmpfs mounts, masks and seccomp program) exceed the " +
              std::to_string(kMaxForkRequestBytes >> 20) +
              " MiB a fork request carries; make env smaller or turn fork_server off");
    // Less where nsbox cannot raise a socket's send buffer past wmem_max.
    if (bytes > capacity)
      at.fail("profile " + ref + ": with fork_server, a " + to_string(language) + " run's settings (" +
              std::to_string(bytes) + " bytes) exceed the " + std::to_string(capacity) +
              " bytes a fork request carries on this host: nsbox cannot raise a socket's send buffer past "
              "net.core.wmem_max without CAP_NET_ADMIN; raise net.core.wmem_max to " +
              std::to_string(bytes + kForkRequestHeadroom) + " or more, make env smaller, or turn fork_server off");
  }
}

void finish_tenant(TenantConfig& t) {
  t.profile_yaml = to_yaml(t.profile);
  t.profile_sha256 = sha256_hex(t.profile_yaml);
}

ListenerConfig read_listener(const Field& f) {
  MapReader map(f, keys_of("listeners[]"));
  auto address = map.get("address");
  if (!address) f.fail("missing key 'address' (e.g. 127.0.0.1:8080)");
  ListenerConfig l;
  try {
    l = parse_listen_address(address->text());
  } catch (const std::invalid_argument& e) {
    address->fail(e.what());
  }
  if (auto lang = map.get("language")) {
    auto parsed = parse_language(lang->text());
    if (!parsed) lang->fail("unknown language \"" + lang->text() + "\" (python or javascript)");
    l.language = parsed;
  }
  if (auto tenant = map.get("tenant")) l.tenant = tenant->text();
  return l;
}

TenantConfig read_tenant(const Field& f, const std::string& dir, const ProfileSearch& search, size_t fork_capacity) {
  MapReader map(f, keys_of("tenants[]"));
  TenantConfig t;
  auto name = map.get("name");
  if (!name) f.fail("missing key 'name'");
  t.name = name->text();
  if (!is_valid_tenant_name(t.name))
    name->fail("\"" + t.name +
               "\" is not a valid tenant name: use lowercase letters, digits, "
               "'.', '_' and '-', starting with a letter or digit, at most 64 characters");
  t.token = read_token_or_token_file(map, dir);
  auto profile = map.get("profile");
  if (!profile) f.fail("missing key 'profile': the profile tenant " + t.name + " runs under");
  t.profile_ref = profile->text();
  t.profile = load_tenant_profile(*profile, t.profile_ref, dir, search);
  check_fork_requests(*profile, t.profile_ref, t.profile, fork_capacity);
  if (auto most = map.get("max_requests")) t.max_requests = static_cast<uint32_t>(most->integer(1, kMaxQueue));
  finish_tenant(t);
  return t;
}

// Requests that may wait for each sandbox slot when queue_depth is unset.
constexpr uint32_t kQueuedPerSlot = 4;

// Without limits: a sandbox per CPU, and kQueuedPerSlot waiting for each.
void use_default_capacity(NodeConfig& c) {
  c.max_concurrent = online_cpus();
  c.queue_depth = kQueuedPerSlot * c.max_concurrent;
}

void read_limits(const Field& f, NodeConfig& c) {
  MapReader map(f, keys_of("limits"));
  if (auto v = map.get("max_concurrent")) c.max_concurrent = static_cast<uint32_t>(v->integer(1, kMaxConcurrent));
  // Unset, it follows max_concurrent, whether that was set or not.
  auto queue_depth = map.get("queue_depth");
  c.queue_depth =
      queue_depth ? static_cast<uint32_t>(queue_depth->integer(0, kMaxQueue)) : kQueuedPerSlot * c.max_concurrent;
  if (auto v = map.get("body_limit")) c.body_limit = v->size(1024, 1ull << 30);
  if (auto v = map.get("client_timeout")) c.client_timeout = v->duration(milliseconds(100), milliseconds(600000));
  if (auto v = map.get("request_timeout")) c.request_timeout = v->duration(milliseconds(1000), milliseconds(3600000));
  if (auto v = map.get("grace_period")) c.grace_period = v->duration(milliseconds(0), milliseconds(3600000));
  if (auto v = map.get("answer_grace")) c.answer_grace = v->duration(milliseconds(5000), milliseconds(3600000));
  if (auto v = map.get("pool_size")) c.pool_size = static_cast<uint32_t>(v->integer(0, kMaxPoolSize));
  if (auto v = map.get("pool_memory")) c.pool_memory = v->size(0, 1ull << 40);
}

std::string read_log_level(const Field& f) {
  static const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  std::string level = f.text();
  if (std::find(kLevels.begin(), kLevels.end(), level) == kLevels.end())
    f.fail("unknown log level \"" + level + "\" (trace, debug, info, warn, error, critical, off)");
  return level;
}

// An origin as browsers send it: scheme://host[:port], nothing after.
std::string read_origin(const Field& f) {
  std::string o = f.text();
  bool scheme = o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0;
  size_t host = o.find("://") + 3;
  if (!scheme || o.size() <= host || o.find('/', host) != std::string::npos ||
      o.find_first_of(" \t*") != std::string::npos)
    f.fail("\"" + o + "\" is not an origin like https://app.example.com (no path, no wildcard)");
  // Browsers send the host in lower case; the comparison is exact.
  std::transform(o.begin() + static_cast<std::ptrdiff_t>(host), o.end(), o.begin() + static_cast<std::ptrdiff_t>(host),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return o;
}

// Whether binding both would fail: a wildcard takes its port on every address
// of its family, and "::" (dual-stack, as the node binds it) on IPv4's too.
bool takes_the_same_port(const ListenerConfig& a, const ListenerConfig& b) {
  if (a.port != b.port) return false;
  auto v6 = [](const ListenerConfig& l) { return l.host.find(':') != std::string::npos; };
  for (const auto* wild : {&a, &b}) {
    const ListenerConfig& other = wild == &a ? b : a;
    if (wild->host == "::") return true;
    if (wild->host == "0.0.0.0" && !v6(other)) return true;
  }
  return false;
}

// Where a config's entries came from, for errors that name two of them:
// each at the line of the entry at fault.
struct EntryFields {
  std::vector<Field> tenants;    // parallel to NodeConfig::tenants
  std::vector<Field> listeners;  // parallel to listeners; empty for the default one
  std::optional<Field> default_tenant;
};

void check_references(const Field& top, const NodeConfig& c, const EntryFields& at) {
  std::set<std::string> names, tokens, addresses;
  for (size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantConfig& t = c.tenants[i];
    if (!names.insert(t.name).second) at.tenants[i].fail("tenant " + t.name + " is defined twice");
    if (!t.token.empty() && !tokens.insert(t.token).second)
      at.tenants[i].fail("tenant " + t.name + " has the same token as another tenant");
  }
  if (!c.default_tenant.empty() && !c.tenant(c.default_tenant))
    (at.default_tenant ? *at.default_tenant : top).fail(c.default_tenant + " is not one of the tenants");
  for (size_t i = 0; i < c.listeners.size(); ++i) {
    const ListenerConfig& l = c.listeners[i];
    const Field& here = i < at.listeners.size() ? at.listeners[i] : top;
    if (!addresses.insert(l.address()).second) here.fail("listener " + l.address() + " is defined twice");
    for (size_t j = 0; j < i; ++j)
      if (takes_the_same_port(c.listeners[j], l))
        here.fail("listeners " + c.listeners[j].address() + " and " + l.address() +
                  " cannot both listen: a wildcard address takes its port on every address");
    if (!l.tenant.empty() && !c.tenant(l.tenant))
      here.fail("listener " + l.address() + ": tenant " + l.tenant + " is not one of the tenants");
  }
}

}  // namespace

std::string ListenerConfig::address() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

ListenerConfig parse_listen_address(const std::string& text) {
  const std::string usage = "\"" + text + "\" is not ADDRESS:PORT with an IP address (127.0.0.1:8080, [::1]:8080)";
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) throw std::invalid_argument(usage);
  std::string host = text.substr(0, colon);
  const bool bracketed = host.front() == '[';
  if (bracketed) {
    if (host.back() != ']') throw std::invalid_argument(usage);
    host = host.substr(1, host.size() - 2);
  }
  // One spelling per address ("::0001" is "::1"), so that a listener given
  // twice is found; an IPv6 address only in brackets ("::1:8080" is an
  // address of its own, and no port).
  unsigned char buf[16];
  char text_form[INET6_ADDRSTRLEN];
  if (!bracketed && ::inet_pton(AF_INET, host.c_str(), buf) == 1) {
    ::inet_ntop(AF_INET, buf, text_form, sizeof text_form);
  } else if (bracketed && ::inet_pton(AF_INET6, host.c_str(), buf) == 1) {
    // The IPv4 address it stands for would collide unseen with that one.
    if (IN6_IS_ADDR_V4MAPPED(reinterpret_cast<const in6_addr*>(buf)))
      throw std::invalid_argument(usage + ": an IPv4-mapped address is written as the IPv4 address");
    ::inet_ntop(AF_INET6, buf, text_form, sizeof text_form);
  } else {
    throw std::invalid_argument(usage);
  }
  host = text_form;
  int port = 0;
  std::string_view p(text.c_str() + colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port < 1 || port > 65535)
    throw std::invalid_argument(usage + ": the port must be 1-65535");
  ListenerConfig l;
  l.host = host;
  l.port = port;
  return l;
}

const TenantConfig* NodeConfig::tenant(const std::string& name) const {
  for (const auto& t : tenants) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Length is not secret (tokens have a known minimum); the content is.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& ref = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ ref[i]);
  return diff == 0;
}

const TenantConfig* NodeConfig::tenant_for_token(const std::string& token) const {
  const TenantConfig* found = nullptr;
  // Every tenant is compared, so the time taken does not say which matched.
  for (const auto& t : tenants) {
    if (!t.token.empty() && constant_time_equal(token, t.token) && !found) found = &t;
  }
  return found;
}

const TenantConfig* NodeConfig::anonymous_tenant(const ListenerConfig& listener) const {
  const std::string& name = listener.tenant.empty() ? default_tenant : listener.tenant;
  return name.empty() ? nullptr : tenant(name);
}

std::vector<std::string> config_warnings(const NodeConfig& c) {
  std::vector<std::string> out;
  bool exposed = false;
  for (const auto& l : c.listeners) {
    const auto address = parse_ip(l.host);
    if (address && is_loopback(canonical(*address))) continue;
    exposed = true;
    if (const TenantConfig* t = c.anonymous_tenant(l))
      out.push_back("listener " + l.address() + " runs code as tenant " + t->name +
                    " for anyone who can reach it, without a token");
  }
  if (exposed && c.metrics_token.empty())
    out.push_back(
        "/metrics answers anyone who can reach a listener that is not loopback (every tenant's figures); "
        "set metrics.token");
  // The fork server is started by the warm pool: without one, it never is.
  std::string forking;
  for (const auto& t : c.tenants)
    if (c.pool_size == 0 && (forks(t.profile, Language::kPython) || forks(t.profile, Language::kJavaScript)))
      forking += (forking.empty() ? "" : ", ") + t.name;
  if (!forking.empty())
    out.push_back("tenants " + forking +
                  " have fork_server in their profiles, but limits.pool_size is 0: no fork server is started and "
                  "their runs start cold; set pool_size to 1 or more");
  return out;
}

namespace {

// The files a config reads settings or secrets from: itself, its token
// files and the profiles it names by path.
std::vector<std::string> files_read_by(const YAML::Node& root, const std::string& file, const std::string& dir) {
  std::vector<std::string> out{file};
  auto scalar_at = [](const YAML::Node& map, const char* key) -> std::string {
    if (!map || !map.IsMap()) return "";
    const YAML::Node v = map[key];
    return v && v.IsScalar() ? v.Scalar() : "";
  };
  const YAML::Node tenants = root["tenants"];
  if (tenants && tenants.IsSequence()) {
    for (const auto& t : tenants) {
      if (std::string f = scalar_at(t, "token_file"); !f.empty()) out.push_back(relative_to(dir, f));
      if (std::string f = scalar_at(t, "profile"); is_profile_path(f)) out.push_back(relative_to(dir, f));
    }
  }
  if (std::string f = scalar_at(root["metrics"], "token_file"); !f.empty()) out.push_back(relative_to(dir, f));
  return out;
}

// The audit log is appended to: were it a file the node reads (its config,
// a token file, a profile), the node would write its records into it and
// refuse its next start or reload with an error about that file.
void check_audit_log_is_its_own(const Field& at, const std::string& audit_log, const std::vector<std::string>& read) {
  struct stat log {};
  if (::stat(audit_log.c_str(), &log) != 0) return;  // made at start: no file read is it
  for (const auto& f : read) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0 && st.st_dev == log.st_dev && st.st_ino == log.st_ino)
      at.fail("audit_log " + audit_log + " is " + f + ", which the node reads: give the audit log a file of its own");
  }
}

}  // namespace

NodeConfig load_node_config_text(const std::string& text, const std::string& file, const ProfileSearch& search) {
  YAML::Node root = profile_yaml::parse_document(file, text);
  if (!root.IsMap())
    profile_yaml::fail(file, root.Mark(),
                       "the top level must be a map of node settings, got " + profile_yaml::describe_shape(root));
  Field top(file, "", root, root.Mark());
  MapReader map(top, keys_of(""));
  const std::string dir = std::filesystem::path(file).parent_path().string();
  NodeConfig c;
  c.source = file;
  use_default_capacity(c);
  EntryFields at;
  if (auto v = map.get("listeners")) {
    at.listeners = v->items();
    for (const auto& item : at.listeners) c.listeners.push_back(read_listener(item));
    if (c.listeners.empty()) v->fail("at least one listener is needed");
  } else {
    c.listeners.push_back(ListenerConfig{});
  }
  auto tenants = map.get("tenants");
  if (!tenants) top.fail("missing key 'tenants': at least one tenant with a profile");
  at.tenants = tenants->items();
  const size_t fork_capacity = fork_request_capacity();  // one socket for all tenants
  for (const auto& item : at.tenants) c.tenants.push_back(read_tenant(item, dir, search, fork_capacity));
  if (c.tenants.empty()) tenants->fail("at least one tenant is needed");
  if (auto v = map.get("default_tenant")) {
    c.default_tenant = v->text();
    at.default_tenant = *v;
  }
  if (auto v = map.get("limits")) read_limits(*v, c);
  if (auto v = map.get("audit_log")) {
    c.audit_log = relative_to(dir, v->text());
    check_audit_log_is_its_own(*v, c.audit_log, files_read_by(root, file, dir));
  }
  if (auto v = map.get("log_level")) c.log_level = read_log_level(*v);
  if (auto v = map.get("cors")) {
    MapReader cors(*v, keys_of("cors"));
    if (auto origins = cors.get("allow_origins")) {
      for (const auto& o : origins->items()) c.cors_origins.push_back(read_origin(o));
    }
  }
  if (auto v = map.get("cgroup_parent")) c.cgroup_parent = v->absolute_path();
  if (auto v = map.get("metrics")) {
    c.metrics_token = read_token_or_token_file(MapReader(*v, keys_of("metrics")), dir);
    if (c.metrics_token.empty()) v->fail("give the token /metrics asks for: token or token_file");
    if (c.tenant_for_token(c.metrics_token))
      v->fail("the metrics token is a tenant's token: a tenant would read every tenant's figures");
  }
  check_references(top, c, at);
  return c;
}

NodeConfig load_node_config(const std::string& path, const ProfileSearch& search) {
  return load_node_config_text(profile_yaml::read_file(path), path, search);
}

NodeConfig builtin_node_config(const ProfileSearch& search) {
  NodeConfig c;
  c.source = "<built-in>";
  c.listeners.push_back(ListenerConfig{});
  use_default_capacity(c);
  TenantConfig t;
  t.name = "default";
  t.profile_ref = "default";
  t.profile = load_profile("default", search);
  finish_tenant(t);
  c.tenants.push_back(std::move(t));
  c.default_tenant = "default";
  return c;
}

const std::vector<std::string>& node_config_schema_keys() {
  static const std::vector<std::string> keys = profile_yaml::dotted_keys(schema());
  return keys;
}

}  // namespace nsbox
