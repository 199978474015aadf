#include "profile_yaml.h"

#include <fcntl.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <yaml-cpp/depthguard.h>

#include "nsbox/digest.h"
#include "nsbox/io.h"
#include "nsbox/run_spec.h"
#include "nsbox/unique_fd.h"
#include "nsbox/units.h"

namespace nsbox::profile_yaml {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxPathBytes = 4095;
constexpr size_t kDescribeMax = 60;

int one_based(int zero_based) { return zero_based < 0 ? 1 : zero_based + 1; }

// What YAML (1.1 or 1.2) would read a plain scalar as, when not a string.
const char* plain_scalar_kind(const std::string& v) {
  static const std::array<std::string_view, 4> kNull{"", "~", "null", "Null"};
  static const std::array<std::string_view, 16> kBool{"true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes",
                                                      "YES",  "no",   "No",   "NO",    "on",    "On",    "off", "Off"};
  if (v == "NULL" || std::find(kNull.begin(), kNull.end(), v) != kNull.end()) return "null";
  if (std::find(kBool.begin(), kBool.end(), v) != kBool.end()) return "a boolean";
  std::istringstream in(v);
  double d;
  in >> d;
  if (!in.fail() && in.eof()) return "a number";
  if (v == ".inf" || v == "-.inf" || v == ".nan" || v.rfind("0x", 0) == 0 || v.rfind("0o", 0) == 0) {
    return "a number";
  }
  return nullptr;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool is_under(const std::string& path, std::string_view dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// "" when path is absolute and in normal form, else the problem.
std::string path_problem(const std::string& path) {
  if (path.empty() || path[0] != '/') return "expected an absolute path, got \"" + path + "\"";
  if (path.size() > kMaxPathBytes) return "the path is longer than 4095 bytes";
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return "the path \"" + path + "\" contains a control character";
    }
  }
  if (path == "/") return "";
  std::string normal;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part == "..") return "the path \"" + path + "\" has a '..' component";
    if (part == ".") return "the path \"" + path + "\" has a '.' component";
    if (!part.empty()) normal += "/" + std::string(part);
    start = end + 1;
  }
  if (normal != path) return "the path \"" + path + "\" is not in normal form: write \"" + normal + "\"";
  return "";
}

}  // namespace

std::string format_number(double d) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(d);
}

void fail(const std::string& file, const YAML::Mark& mark, const std::string& message) {
  throw ProfileError(file, one_based(mark.line), one_based(mark.column), message);
}

// Where a second YAML document starts (1-based line and column), or line 0.
// yaml-cpp's LoadAll would tell, but it loops forever allocating on some
// malformed inputs (found by tests/fuzz), so the text is scanned instead: a
// document marker (--- or ...) after content, then the next content.
std::pair<int, int> second_document(const std::string& text) {
  bool content = false, ended = false;
  int line = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + start, end - start);
    ++line;
    start = end + 1;
    const bool marker = l.substr(0, 3) == "---" || l.substr(0, 3) == "...";
    if (marker && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r')) {
      const size_t rest = l.find_first_not_of(" \t\r", 3);
      const bool inline_content = rest != std::string_view::npos && l[rest] != '#';
      if (content && (ended || l[0] == '-') && inline_content) return {line, static_cast<int>(rest) + 1};
      if (content) ended = true;
      if (inline_content) content = true;
      continue;
    }
    const size_t first = l.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || l[first] == '#') continue;
    if (ended) return {line, static_cast<int>(first) + 1};
    content = true;
  }
  return {0, 0};
}

// Offset of the first byte that is not YAML's printable UTF-8 text, or
// npos: well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing past U+10FFFF) of YAML's c-printable characters (tab, line
// breaks, and no other C0 or C1 control, DEL, U+FFFE or U+FFFF). yaml-cpp
// checks neither: it reads a raw NUL into a value, and its emitter decodes
// bad bytes loosely, so a profile printed back (to_yaml) could hold
// another value (an overlong C0 80 came back as a NUL).
static size_t first_unprintable(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F) return i;
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b == 0xC2) {
      len = 2;
      lo = 0xA0;  // C1 controls, except NEL (C2 85) below
    } else if (b >= 0xC3 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // overlong
      if (b == 0xED) hi = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // overlong
      if (b == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    const bool nel = b == 0xC2 && static_cast<unsigned char>(s[i + 1]) == 0x85;
    for (size_t k = 1; k < len && !nel; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
    }
    // U+FFFE and U+FFFF: EF BF BE, EF BF BF.
    if (b == 0xEF && static_cast<unsigned char>(s[i + 1]) == 0xBF && static_cast<unsigned char>(s[i + 2]) >= 0xBE)
      return i;
    i += len;
  }
  return std::string_view::npos;
}

YAML::Node parse_document(const std::string& file, const std::string& text) {
  if (size_t bad = first_unprintable(text); bad != std::string_view::npos) {
    const size_t line_start = bad == 0 ? 0 : text.rfind('\n', bad - 1) + 1;  // npos + 1 == 0
    const int line =
        1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n'));
    throw ProfileError(file, line, static_cast<int>(bad - line_start) + 1,
                       "not printable UTF-8, which YAML text must be: byte 0x" +
                           to_hex(reinterpret_cast<const unsigned char*>(&text[bad]), 1));
  }
  auto [line, column] = second_document(text);
  if (line > 0) {
    throw ProfileError(file, line, column, "a second YAML document: a file holds exactly one");
  }
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for it is "bad file"; its depth counts parser
    // steps, not levels of the document.
    fail(file, e.mark, "YAML nested too deeply for the parser: flatten the document");
  } catch (const YAML::ParserException& e) {
    fail(file, e.mark, "YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    fail(file, e.mark, "YAML error: " + e.msg);
  }
  if (!doc || doc.IsNull()) {
    fail(file, YAML::Mark::null_mark(), "the file is empty: expected a map of keys");
  }
  return doc;
}

namespace {

// Who may have written a file or directory the node or a run trusts: root
// or the user nsbox runs as, and no one else through its mode. A
// directory writable by others must be sticky (as /tmp), where they cannot
// replace what is ours.
std::string untrusted_because(const struct stat& st, bool directory) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me)
    return "owned by uid " + std::to_string(st.st_uid) + ", neither root nor the user nsbox runs as (uid " +
           std::to_string(me) + ")";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(directory && (st.st_mode & S_ISVTX))) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("writable by group or others (mode ") + mode + "); chmod go-w it";
  }
  return "";
}

}  // namespace

std::string read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) throw ProfileError(path, 0, 0, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw ProfileError(path, 0, 0, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw ProfileError(path, 0, 0, "not a regular file");
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    throw ProfileError(path, 0, 0, "larger than 1MiB: not a profile");
  }
  // What a profile, config or token says decides what runs may do: a file
  // anyone else could have written (a profiles/ directory they made beside
  // a binary in /tmp, say) is refused, not obeyed.
  if (std::string why = untrusted_because(st, false); !why.empty())
    throw ProfileError(path, 0, 0, "not trusted: " + why);
  // Its directory, and the directory of the name it was given by (a link
  // in a directory others may write is theirs to point anywhere); a
  // directory that cannot be told is refused, not skipped.
  char real[PATH_MAX];
  const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
  const ssize_t n = ::readlink(self.c_str(), real, sizeof real - 1);
  if (n <= 0 || real[0] != '/')
    throw ProfileError(path, 0, 0, "not trusted: cannot tell which directory holds it (" + self + ")");
  real[n] = '\0';
  const std::string named_dir = std::filesystem::path(path).parent_path().string();
  for (const std::string& dir :
       {std::filesystem::path(real).parent_path().string(), named_dir.empty() ? std::string(".") : named_dir}) {
    struct stat dst {};
    if (::stat(dir.c_str(), &dst) != 0)
      throw ProfileError(path, 0, 0, "not trusted: its directory " + dir + ": " + std::strerror(errno));
    if (std::string why = untrusted_because(dst, true); !why.empty())
      throw ProfileError(path, 0, 0, "not trusted: its directory " + dir + " is " + why);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const size_t got = read_full(fd.get(), text.data(), text.size());
  text.resize(got);
  return text;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  std::string v = node.Scalar();
  if (v.size() > kDescribeMax) v = v.substr(0, kDescribeMax) + "...";
  if (node.Tag() != "?") return "the quoted string \"" + v + "\"";
  return "\"" + v + "\"";
}

std::string describe_shape(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull() || node.IsMap() || node.IsSequence()) return describe(node);
  return "a string of " + std::to_string(node.Scalar().size()) + " bytes";
}

std::string key_for_error(const std::string& key) {
  const bool name_like = !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
  return name_like ? "'" + key + "'" : "of " + std::to_string(key.size()) + " bytes";
}

std::string closest(std::string_view word, const std::vector<std::string_view>& candidates) {
  std::string best;
  size_t best_distance = 3;
  for (auto c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance && d < word.size()) {
      best = std::string(c);
      best_distance = d;
    }
  }
  return best;
}

Field::Field(const std::string& file, std::string path, const YAML::Node& node, YAML::Mark mark)
    : file_(file), path_(std::move(path)), node_(node), mark_(mark) {}

Field& Field::operator=(const Field& other) {
  if (this != &other) {
    file_ = other.file_;
    path_ = other.path_;
    node_.reset(other.node_);
    mark_ = other.mark_;
  }
  return *this;
}

void Field::fail(const std::string& message) const {
  profile_yaml::fail(file_, mark_, path_.empty() ? message : path_ + ": " + message);
}

void Field::expect_map() const {
  if (!node_.IsMap()) fail("expected a map, got " + describe(node_));
}

void Field::expect_list() const {
  if (!node_.IsSequence()) fail("expected a list, got " + describe(node_));
}

std::vector<Field> Field::items() const {
  expect_list();
  std::vector<Field> out;
  size_t i = 0;
  for (const auto& item : node_) {
    YAML::Mark m = item.IsNull() ? mark_ : item.Mark();
    out.emplace_back(file_, path_ + "[" + std::to_string(i++) + "]", item, m);
  }
  return out;
}

std::string Field::string() const {
  if (!node_.IsScalar()) fail("expected a string, got " + describe(node_));
  return node_.Scalar();
}

std::string Field::text() const {
  std::string v = string();
  if (node_.Tag() == "?") {
    if (const char* kind = plain_scalar_kind(v)) {
      fail("expected a string, got \"" + v + "\", which YAML reads as " + kind + ": quote it");
    }
  }
  return v;
}

std::optional<bool> Field::maybe_boolean() const {
  if (!is_plain_scalar()) return std::nullopt;
  const std::string& v = node_.Scalar();
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  return std::nullopt;
}

bool Field::boolean() const {
  if (auto b = maybe_boolean()) return *b;
  fail("expected true or false, got " + describe(node_));
}

uint64_t Field::integer(uint64_t min, uint64_t max) const {
  std::string range = std::to_string(min) + ".." + std::to_string(max);
  if (!is_plain_scalar() || !all_digits(node_.Scalar())) {
    fail("expected an integer in " + range + ", got " + describe(node_));
  }
  const std::string& v = node_.Scalar();
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < min || n > max) {
    fail(v + " is out of range " + range);
  }
  return n;
}

double Field::number(double min, double max) const {
  std::string range = format_number(min) + ".." + format_number(max);
  const std::string v = is_plain_scalar() ? node_.Scalar() : std::string();
  size_t dot = v.find('.');
  bool shape = dot == std::string::npos ? all_digits(v) : all_digits(v.substr(0, dot)) && all_digits(v.substr(dot + 1));
  if (!shape) fail("expected a number in " + range + ", got " + describe(node_));
  double d = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || end != v.data() + v.size() || d < min || d > max) {
    fail(v + " is out of range " + range);
  }
  return d;
}

uint64_t Field::size(uint64_t min, uint64_t max) const {
  if (!node_.IsScalar()) {
    fail("expected a size with a unit (B, KiB, MiB, GiB, TiB), got " + describe(node_));
  }
  uint64_t n = 0;
  try {
    n = parse_size(node_.Scalar());
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (n < min || n > max) {
    fail(node_.Scalar() + " is out of range " + format_size(min) + ".." + format_size(max));
  }
  return n;
}

std::chrono::milliseconds Field::duration(std::chrono::milliseconds min, std::chrono::milliseconds max) const {
  if (!node_.IsScalar()) {
    fail("expected a duration with a unit (ms, s, m, h), got " + describe(node_));
  }
  std::chrono::milliseconds d{};
  try {
    d = parse_duration(node_.Scalar());
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (d < min || d > max) {
    fail(node_.Scalar() + " is out of range " + format_duration(min) + ".." + format_duration(max));
  }
  return d;
}

std::string Field::absolute_path() const {
  if (!node_.IsScalar()) fail("expected an absolute path, got " + describe(node_));
  std::string p = node_.Scalar();
  if (std::string problem = path_problem(p); !problem.empty()) fail(problem);
  return p;
}

std::string Field::sandbox_target(const char* what) const {
  std::string p = absolute_path();
  std::string w(what);
  if (p == "/") fail("a " + w + " cannot go onto /: the root is the rootfs (see filesystem.rootfs)");
  if (is_under(p, "/proc")) fail("a " + w + " cannot go onto /proc or below: nsbox builds /proc itself");
  if (is_under(p, "/dev")) fail("a " + w + " cannot go onto /dev or below: nsbox builds /dev itself");
  if (is_under(p, "/sys")) fail("a " + w + " cannot go onto /sys or below: the sandbox has no /sys");
  return p;
}

std::string Field::host_source() const {
  std::string p = absolute_path();
  if (p == "/") fail("the host's whole filesystem (/) cannot be mounted into the sandbox");
  for (std::string_view dir : {"/proc", "/sys", "/dev"}) {
    if (is_under(p, dir)) {
      fail("the host's " + std::string(dir) +
           " (or anything below it) cannot be mounted into the sandbox: it reaches host processes, "
           "devices or kernel settings");
    }
  }
  return p;
}

MapReader::MapReader(const Field& map, const std::vector<std::string_view>& known) : field_(map) { read(&known); }

MapReader::MapReader(const Field& map) : field_(map) { read(nullptr); }

void MapReader::read(const std::vector<std::string_view>* known) {
  const Field& map = field_;
  map.expect_map();
  const std::string where = map.path().empty() ? "top-level key" : "key";
  const std::string in = map.path().empty() ? "" : " in " + map.path();
  std::map<std::string, int> seen;  // key -> 1-based line
  for (const auto& kv : map.node()) {
    const YAML::Node& k = kv.first;
    if (!k.IsScalar()) {
      profile_yaml::fail(map.file(), k.Mark(), "keys must be strings, got " + describe(k));
    }
    const std::string key = k.Scalar();
    if (auto it = seen.find(key); it != seen.end()) {
      profile_yaml::fail(
          map.file(), k.Mark(),
          "duplicate " + where + " " + key_for_error(key) + in + " (first on line " + std::to_string(it->second) + ")");
    }
    seen.emplace(key, one_based(k.Mark().line));
    if (known && std::find(known->begin(), known->end(), key) == known->end()) {
      std::string hint = closest(key, *known);
      profile_yaml::fail(
          map.file(), k.Mark(),
          "unknown " + where + " " + key_for_error(key) + in + (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
    const YAML::Node& v = kv.second;
    std::string path = map.path().empty() ? key : map.path() + "." + key;
    entries_.push_back(Entry{key, k, Field(map.file(), path, v, v.IsNull() ? k.Mark() : v.Mark())});
  }
}

std::optional<Field> MapReader::get(std::string_view key) const {
  for (const auto& e : entries_) {
    if (e.key == key) return e.value;
  }
  return std::nullopt;
}

void check_env_name(const Field& key_field, const std::string& name) {
  if (!is_env_name(name)) {
    key_field.fail("\"" + name + "\" is not a valid variable name: expected [A-Za-z_][A-Za-z0-9_]*");
  }
  if (const std::string why = env_name_refusal(name); !why.empty()) key_field.fail(why);
}

std::string env_value(const Field& value) {
  std::string v = value.text();
  if (v.find('\0') != std::string::npos) value.fail("the value contains a NUL byte");
  return v;
}

bool is_known_syscall(const std::string& name, const char* arch) {
  uint32_t token = seccomp_arch_resolve_name(arch);
  return token != 0 && seccomp_syscall_resolve_name_arch(token, name.c_str()) >= 0;
}

std::vector<std::string> syscall_names(const Field& f, const char* arch) {
  std::vector<std::string> names;
  std::map<std::string, std::string> seen;
  for (const Field& item : f.items()) {
    std::string name = item.text();
    if (!is_known_syscall(name, arch)) item.fail("unknown system call \"" + name + "\" on " + arch);
    auto [it, fresh] = seen.emplace(name, item.path());
    if (!fresh) item.fail("duplicate system call " + name + " (also " + it->second + ")");
    names.push_back(name);
  }
  return names;
}

void require_execve(const Field& list, const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), "execve") == names.end())
    list.fail("must include execve: nsbox starts the program with it once the filter is in place");
}

const std::vector<std::string_view>& keys_of(const Schema& schema, std::string_view section) {
  for (const auto& s : schema) {
    if (s.path == section) return s.keys;
  }
  throw std::logic_error("no schema section " + std::string(section));
}

std::vector<std::string> dotted_keys(const Schema& schema) {
  std::vector<std::string> out;
  for (const auto& s : schema) {
    for (auto k : s.keys) out.push_back(s.path.empty() ? std::string(k) : std::string(s.path) + "." + std::string(k));
  }
  return out;
}

}  // namespace nsbox::profile_yaml
