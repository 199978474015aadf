// `nsbox doctor`: what this host supports and what nsbox would lose here.
#pragma once

#include <ostream>
#include <string>

namespace nsbox {

// Prints the report; returns 0 when everything nsbox needs by default is
// present, 1 otherwise.
int run_doctor(const std::string& rootfs, std::ostream& out);

}  // namespace nsbox
