// `nsbox check [--from openjiuwen] FILE...`: validates profiles and prints
// each one fully resolved, so an operator sees exactly what a run would get.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "nsbox/profile_loader.h"

namespace nsbox {

// Loads each file (or profile name) with load_profile, or with
// load_openjiuwen_config when from_openjiuwen; prints every valid one as a
// YAML document ("---" first) on out and every error as one line on err.
// Returns 0 when all are valid, 1 otherwise (also when files is empty).
int run_check(const std::vector<std::string>& files, bool from_openjiuwen, const ProfileSearch& search,
              std::ostream& out, std::ostream& err);

}  // namespace nsbox
