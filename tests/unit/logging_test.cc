#include "nsbox/logging.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <string>

namespace nsbox {
namespace {

// What a process that set up the node's logger wrote to its stderr, a pipe
// that $JOURNAL_STREAM names (as systemd names journald's stream) when
// journal is true.
std::string log_lines(bool journal) {
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 2);
    struct stat st {};
    ::fstat(2, &st);
    if (journal) {
      ::setenv("JOURNAL_STREAM", (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(), 1);
    } else {
      ::setenv("JOURNAL_STREAM", "1:2", 1);  // another stream's: not ours
    }
    log_to_stderr("test");
    spdlog::set_level(spdlog::level::debug);
    spdlog::info("serving");
    spdlog::warn("no audit_log");
    spdlog::error(std::string("run r1: text a run chose\n<0>forged emergency\r and \0<0>another", 61));
    spdlog::critical("stopping");
    spdlog::debug("detail");
    spdlog::default_logger()->flush();
    const std::string fatal = error_line_prefix() + "nsbox serve: why it exits\n";  // not through the logger
    (void)!::write(2, fatal.data(), fatal.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    out.push_back(text.substr(at, end - at));
  return out;
}

TEST(Logging, UnderJournaldEachLineLeadsWithItsSyslogPriority) {
  const std::vector<std::string> lines = lines_of(log_lines(true));
  ASSERT_EQ(lines.size(), 6u) << log_lines(true);
  const std::vector<std::string> priorities = {"<6>", "<4>", "<3>", "<2>", "<7>", "<3>nsbox serve: why it exits"};
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].rfind(priorities[i], 0), 0u) << lines[i];
  EXPECT_NE(lines[1].find(" warning no audit_log"), std::string::npos) << lines[1];
}

// A message's line break would start a line of its own, which journald
// reads a priority from: "<0>" is an emergency, written to every terminal.
TEST(Logging, AMessagesLineBreaksCannotStartALineOfTheirOwn) {
  const std::vector<std::string> lines = lines_of(log_lines(true));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_NE(lines[2].find("run r1: text a run chose\\n<0>forged emergency\\r and \\0<0>another"), std::string::npos)
      << lines[2];
  EXPECT_EQ(lines[2].find('\0'), std::string::npos);
}

TEST(Logging, ElsewhereLinesCarryNoPriority) {
  const std::string text = log_lines(false);
  const std::vector<std::string> lines = lines_of(text);
  ASSERT_EQ(lines.size(), 6u) << text;
  for (const auto& line : lines) EXPECT_NE(line.front(), '<') << line;
  EXPECT_NE(lines[0].find(" info serving"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace nsbox
