// Strict reading of YAML values for profiles and the platform's
// sandbox_config.yaml: every accessor either returns a validated value or
// throws ProfileError at the value's file, line and column, naming the key
// path ("limits.memory: ..."). Private to the loader (profile_loader.cc,
// openjiuwen.cc).
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nsbox/profile.h"

namespace nsbox::profile_yaml {

[[noreturn]] void fail(const std::string& file, const YAML::Mark& mark, const std::string& message);

// Parses one YAML document; syntax errors, an empty file and several
// documents become ProfileError.
YAML::Node parse_document(const std::string& file, const std::string& text);

// Reads a whole file (at most 1 MiB); ProfileError without position when it
// cannot be read, or when anyone but root or the user nsbox runs as could
// have written it: owned by another user, writable by group or others, or
// in a directory that is (and not sticky).
std::string read_file(const std::string& path);

// "a map", "a list", "nothing", "\"text\"" or "the quoted string \"64\"".
std::string describe(const YAML::Node& node);

// As describe, but a scalar is only "a string of N bytes": for what a whole
// file turned out to be, where a file that is no profile (a token file, a
// password file named by mistake) must not be quoted into an error.
std::string describe_shape(const YAML::Node& node);

// A key as an error may show it: 'name' when it could be a setting's name,
// otherwise "of N bytes" (a line of a file that is no profile is no key).
std::string key_for_error(const std::string& key);

// The shortest decimal that reads back as d ("1", "0.5").
std::string format_number(double d);

// The closest of candidates within edit distance 2, or "".
std::string closest(std::string_view word, const std::vector<std::string_view>& candidates);

// A value in a file with its key path, for precise errors.
class Field {
 public:
  Field(const std::string& file, std::string path, const YAML::Node& node, YAML::Mark mark);
  Field(const Field&) = default;
  // YAML::Node's operator= writes into the node it refers to; a Field only
  // ever rebinds.
  Field& operator=(const Field& other);

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  const YAML::Mark& mark() const { return mark_; }

  // Throws "PATH: message" at this value.
  [[noreturn]] void fail(const std::string& message) const;

  bool is_map() const { return node_.IsMap(); }
  bool is_list() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }
  bool is_plain_scalar() const { return node_.IsScalar() && node_.Tag() == "?"; }

  void expect_map() const;
  void expect_list() const;
  // Elements of a list, with paths "PATH[i]".
  std::vector<Field> items() const;

  std::string string() const;                 // any scalar
  std::string text() const;                   // a scalar YAML would not read as a number, bool or null
  bool boolean() const;                       // true/false
  std::optional<bool> maybe_boolean() const;  // true/false, or nullopt for anything else
  uint64_t integer(uint64_t min, uint64_t max) const;
  double number(double min, double max) const;
  uint64_t size(uint64_t min, uint64_t max) const;
  std::chrono::milliseconds duration(std::chrono::milliseconds min, std::chrono::milliseconds max) const;
  // An absolute path in normal form (no '.', '..', '//', trailing '/').
  std::string absolute_path() const;
  // absolute_path() that is not '/', /proc, /dev, /sys or below: where
  // something may be mounted inside the sandbox. what: "mount", "tmpfs", ...
  std::string sandbox_target(const char* what) const;
  // absolute_path() that may be exposed from the host: not '/', not under
  // /proc, /sys or /dev.
  std::string host_source() const;

 private:
  std::string file_;
  std::string path_;
  YAML::Node node_;
  YAML::Mark mark_;
};

// A map whose keys are checked once: all scalars, no duplicates, each one of
// `known` (else "unknown key 'memroy' in limits (did you mean 'memory'?)").
class MapReader {
 public:
  MapReader(const Field& map, const std::vector<std::string_view>& known);
  // Any key (env, environment): still scalar and unique.
  explicit MapReader(const Field& map);

  struct Entry {
    std::string key;
    YAML::Node key_node;
    Field value;
  };
  const std::vector<Entry>& entries() const { return entries_; }
  std::optional<Field> get(std::string_view key) const;
  const Field& field() const { return field_; }

 private:
  void read(const std::vector<std::string_view>* known);

  Field field_;
  std::vector<Entry> entries_;
};

// Environment: name [A-Za-z_][A-Za-z0-9_]*, value a string; LD_PRELOAD,
// LD_LIBRARY_PATH and LD_AUDIT refused with the reason.
void check_env_name(const Field& key_field, const std::string& name);
std::string env_value(const Field& value);

// A YAML schema as the maps it has and the keys each accepts ("" is the top
// level, "a.b[]" the items of list b in map a).
struct SchemaSection {
  std::string_view path;
  std::vector<std::string_view> keys;
};
using Schema = std::vector<SchemaSection>;

// The keys of one section; std::logic_error for a section not in schema.
const std::vector<std::string_view>& keys_of(const Schema& schema, std::string_view section);
// Every key as a dotted path ("limits.memory"), in schema order.
std::vector<std::string> dotted_keys(const Schema& schema);

// Syscall names checked against libseccomp's table for x86_64 or aarch64.
bool is_known_syscall(const std::string& name, const char* arch);

// A YAML list of syscall names for arch: each known to libseccomp, none twice.
std::vector<std::string> syscall_names(const Field& f, const char* arch);
// An allow list must let the program start: the filter is in place before
// nsbox's execve of it.
void require_execve(const Field& list, const std::vector<std::string>& names);

}  // namespace nsbox::profile_yaml
