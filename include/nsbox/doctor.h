// `nsbox doctor`: what this host supports and what nsbox would lose here.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "nsbox/node_config.h"
#include "nsbox/profile.h"

namespace nsbox {

struct DoctorOptions {
  std::string rootfs;             // the tree the default launch uses
  Profile default_profile;        // what `nsbox run` uses without --profile: the default launch's
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
