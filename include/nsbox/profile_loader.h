// Loading profiles from YAML: strict schema, `extends` resolution, defaults,
// printing back, and migration from the platform's sandbox_config.yaml.
// Every error is a ProfileError naming FILE:LINE:COL (docs/PROFILES.md).
#pragma once

#include <string>
#include <vector>

#include "nsbox/profile.h"

namespace nsbox {

// Where profile names are looked up, in order: <dir>/<name>.yaml. The name
// `default` resolves to the built-in copy of profiles/default.yaml when no
// directory has a default.yaml.
struct ProfileSearch {
  std::vector<std::string> dirs;
};

// $NSBOX_PROFILE_PATH (colon-separated), then /etc/nsbox/profiles, then the
// installed <datadir>/nsbox/profiles, then <argv0_dir>/../profiles (so
// build/nsbox finds the repository's profiles/).
ProfileSearch default_profile_search(const std::string& argv0_dir);

// Loads, resolves `extends` through search, validates and applies defaults.
Profile load_profile_file(const std::string& path, const ProfileSearch& search);

// A value containing '/' or ending in ".yaml" is a path; anything else a
// name looked up in search. An unknown or malformed name throws
// std::invalid_argument; errors inside files throw ProfileError.
Profile load_profile(const std::string& name_or_path, const ProfileSearch& search);

// As load_profile_file, from text; file is the name used in errors.
Profile load_profile_text(const std::string& text, const std::string& file, const ProfileSearch& search);

// The fully resolved profile, every key in schema order, units formatted,
// no `extends`: load_profile_text(to_yaml(p)) equals p except for
// source_file and inheritance.
std::string to_yaml(const Profile& profile);

// Every key the loader accepts as a dotted path ("limits.memory",
// "filesystem.mounts[].target", "env", ...), in schema order.
const std::vector<std::string>& profile_schema_keys();

// The text of profiles/default.yaml as built into the binary.
const std::string& embedded_default_profile();

// [a-z0-9][a-z0-9._-]*, at most 64 characters.
bool is_valid_profile_name(const std::string& name);

// Migration: the platform's sandbox_config.yaml (openJiuwen's bubblewrap
// gateway) as a Profile built on `default` (resolved through search, else the
// built-in copy). See docs/PROFILES.md for the mapping and what is refused.
Profile load_openjiuwen_config(const std::string& path, const ProfileSearch& search = {});

// Every key of sandbox_config.yaml the migration understands, dotted.
const std::vector<std::string>& openjiuwen_schema_keys();

}  // namespace nsbox
