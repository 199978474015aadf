// The node's log: one line per event on stderr, which a service manager
// collects. Under systemd that stream goes to journald, which reads a
// leading "<N>" as the line's syslog priority.
#pragma once

#include <spdlog/common.h>

#include <string>

namespace nsbox {

// True when stderr is the journald stream $JOURNAL_STREAM names
// ("DEVICE:INODE", set by systemd for a unit's stdout/stderr).
bool stderr_is_journal();

// The syslog priority of a log level: critical 2, error 3, warn 4, info 6,
// debug and trace 7.
int syslog_priority(spdlog::level::level_enum level);

// What leads a line written to stderr outside the logger (why nsbox serve
// exits): "<3>" when stderr goes to journald, else nothing.
std::string error_line_prefix();

// Makes the default logger write to stderr, a record per line (a newline in
// a message is written as "\n"), each line led by its priority when
// stderr goes to journald (so `journalctl -p warning` finds warnings).
void log_to_stderr(const std::string& name);

}  // namespace nsbox
