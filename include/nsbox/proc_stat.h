// The fields of /proc/PID/stat. The command name (field 2) may hold spaces
// and parentheses, so the fields after it are found from its last ')'.
#pragma once

#include <sys/types.h>

#include <string>

namespace nsbox {

// Field n (numbered as proc(5) numbers them, n >= 3) of /proc/PID/stat, or
// of /proc/self/stat for pid 0; empty when the process is gone or the file
// has fewer fields.
std::string proc_stat_field(pid_t pid, int n);

}  // namespace nsbox
