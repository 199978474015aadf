// When an integration test fails, prints what the kernel logged while it
// ran, by any process (ctest runs tests side by side), about processes
// killed by a fault (segfault, general protection, trap,
// with their instruction pointer, mapping and code bytes): a sandboxed run
// killed by SIGSEGV otherwise leaves nothing that says where it crashed.
// Needs read access to /dev/kmsg (root); elsewhere it stays silent.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nsbox/unique_fd.h"

namespace {

bool is_fault_record(const std::string& message) {
  for (const char* marker : {"segfault at", "general protection", "trap ", "traps:", "Code: ", "invalid opcode",
                             "potentially unexpected fatal signal"})
    if (message.find(marker) != std::string::npos) return true;
  return false;
}

// The fault records readable from `fd`, positioned where the test began.
std::vector<std::string> fault_records_since(int fd) {
  std::vector<std::string> out;
  char record[8192];
  for (;;) {
    const ssize_t n = read(fd, record, sizeof record - 1);
    if (n < 0 && errno == EPIPE) continue;  // overwritten while we read: go on
    if (n <= 0) break;                      // EAGAIN: nothing more
    const std::string text(record, static_cast<size_t>(n));
    const size_t semicolon = text.find(';');
    if (semicolon == std::string::npos) continue;
    std::string message = text.substr(semicolon + 1);
    message = message.substr(0, message.find('\n'));
    if (is_fault_record(message)) out.push_back(message);
  }
  return out;
}

class KernelFaultsOnFailure : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo&) override {
    kmsg_.reset(open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (kmsg_ && lseek(kmsg_.get(), 0, SEEK_END) < 0) kmsg_.reset();
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (kmsg_ && info.result() && info.result()->Failed()) {
      const std::vector<std::string> records = fault_records_since(kmsg_.get());
      if (!records.empty())
        std::printf("kernel log of faults by any process while this test ran (%zu):\n", records.size());
      for (size_t i = 0; i < records.size() && i < 24; ++i) std::printf("  kernel: %s\n", records[i].c_str());
      std::fflush(stdout);
    }
    kmsg_.reset();
  }

 private:
  nsbox::UniqueFd kmsg_;
};

// Registered before gtest_main runs the tests.
const bool kRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new KernelFaultsOnFailure);
  return true;
}();

}  // namespace
