#include "nsbox/logging.h"

#include <sys/stat.h>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace nsbox {
namespace {

// %* : "<N>", the record's syslog priority, for journald.
class PriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    // One digit (0..7): no string made per line.
    const char text[] = {'<', static_cast<char>('0' + syslog_priority(msg.level)), '>'};
    dest.append(text, text + sizeof text);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

// %& : the message on one line. A line break (or NUL) in it would start a record of
// its own, which journald would read a priority from (a "<0>" is an
// emergency, sent to every terminal), and which a log reader takes as nsbox's.
class OneLineMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    for (const char c : msg.payload) {
      // journald ends a record at a NUL too.
      const char escaped[] = {'\\', c == '\n' ? 'n' : c == '\r' ? 'r' : '0'};
      if (c == '\n' || c == '\r' || c == '\0') {
        dest.append(escaped, escaped + 2);
      } else {
        dest.push_back(c);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<OneLineMessageFlag>(); }
};

}  // namespace

bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long dev = 0;
  unsigned long long ino = 0;
  if (!stream || std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return ::fstat(2, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

std::string error_line_prefix() {
  return stderr_is_journal() ? "<" + std::to_string(syslog_priority(spdlog::level::err)) + ">" : "";
}

int syslog_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical:
      return 2;
    case spdlog::level::err:
      return 3;
    case spdlog::level::warn:
      return 4;
    case spdlog::level::info:
      return 6;
    default:
      return 7;
  }
}

void log_to_stderr(const std::string& name) {
  auto logger = spdlog::stderr_logger_mt(name);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PriorityFlag>('*').add_flag<OneLineMessageFlag>('&');
  formatter->set_pattern(std::string(stderr_is_journal() ? "%*" : "") + "%Y-%m-%dT%H:%M:%S.%e %l %&");
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
}

}  // namespace nsbox
