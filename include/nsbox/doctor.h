// `nsbox doctor`: what this host supports and what nsbox would lose here.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "nsbox/node_config.h"
#include "nsbox/profile.h"

namespace nsbox {

struct DoctorOptions {
  std::string rootfs;  // the tree the default launch uses
  // What `nsbox run` uses without --profile: the default launch's; unset
  // when it does not load, and why in default_profile_error (a FAIL line).
  std::optional<Profile> default_profile;
  std::string default_profile_error;
  bool rootfs_given = false;      // --rootfs: the profiles' launches use it too
  std::vector<Profile> profiles;  // each also gets what it would lose here
  // The node whose runs the host's per-user quotas must hold: the built-in
  // one, or --config's, whose tenants' profiles are then checked as well.
  NodeConfig node;
  bool node_given = false;
};

// Prints the report; returns 0 when everything nsbox needs by default, and
// every profile given, works here, 1 otherwise (lines marked FAIL).
int run_doctor(const DoctorOptions& options, std::ostream& out);

}  // namespace nsbox
