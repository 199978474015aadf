// Reading fields of /proc/PID/stat past a command name that mimics them.
#include "nsbox/proc_stat.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace nsbox {
namespace {

// A child whose name holds ") " and numbers, as a workload may name itself
// to mislead a reader that splits at the first ')'.
class NamedChild {
 public:
  explicit NamedChild(const char* name) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_NAME, name);
      ::setsid();
      (void)!::write(ready[1], "x", 1);
      ::pause();
      ::_exit(0);
    }
    char c;
    ::close(ready[1]);
    (void)!::read(ready[0], &c, 1);
    ::close(ready[0]);
  }
  ~NamedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

TEST(ProcStat, FieldsAreCountedFromTheLastParenthesisOfTheName) {
  NamedChild child(") S 1 1 1 (");
  ASSERT_GT(child.pid(), 0);
  // Running ("R") between its write and pause(); asleep ("S") after.
  for (int i = 0; i < 500 && proc_stat_field(child.pid(), 3) != "S"; ++i) ::usleep(10000);
  EXPECT_EQ(proc_stat_field(child.pid(), 3), "S");
  EXPECT_EQ(proc_stat_field(child.pid(), 4), std::to_string(::getpid()));
  EXPECT_EQ(proc_stat_field(child.pid(), 6), std::to_string(child.pid())) << "its own session";
  EXPECT_FALSE(proc_stat_field(child.pid(), 22).empty());
}

TEST(ProcStat, SelfIsPidZeroAndMissingIsEmpty) {
  EXPECT_EQ(proc_stat_field(0, 4), std::to_string(::getppid()));
  EXPECT_EQ(proc_stat_field(0, 1000), "");
  EXPECT_EQ(proc_stat_field(0, 2), "") << "the name is not a counted field";
  const pid_t reaped = ::fork();
  if (reaped == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(reaped, nullptr, 0), reaped);
  EXPECT_EQ(proc_stat_field(reaped, 3), "") << "a process that is gone";
}

}  // namespace
}  // namespace nsbox
