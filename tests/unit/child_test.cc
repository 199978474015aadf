// only_process_left(): how PID 1 knows that the run is over before it goes
// (the supervisor then answers without waiting for the namespaces to end).
// Each case runs in a forked process, whose children are its own.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include <gtest/gtest.h>

#include "nsbox/child.h"

namespace nsbox {
namespace {

// The exit code body() gives in a forked process; -1 if it did not exit.
int in_fresh_process(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// Kills and reaps child; then returns answer.
int kill_and_return(pid_t child, int answer) {
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, __WALL);
  return answer;
}

TEST(OnlyProcessLeft, TrueWithoutChildren) {
  EXPECT_EQ(in_fresh_process([] { return only_process_left() ? 1 : 0; }), 1);
}

TEST(OnlyProcessLeft, FalseWhileAChildRuns) {
  EXPECT_EQ(in_fresh_process([] {
              pid_t child = ::fork();
              if (child == 0) {
                ::pause();
                ::_exit(0);
              }
              return kill_and_return(child, only_process_left() ? 1 : 0);
            }),
            0);
}

TEST(OnlyProcessLeft, ReapsAChildThatHasExitedAndThenSaysTrue) {
  EXPECT_EQ(in_fresh_process([] {
              pid_t child = ::fork();
              if (child == 0) ::_exit(0);
              siginfo_t info{};
              // Wait until it is a zombie, and leave it one (WNOWAIT).
              if (::waitid(P_PID, child, &info, WEXITED | WNOWAIT) != 0) return 10;
              if (!only_process_left()) return 11;
              // It was reaped by only_process_left().
              return ::waitpid(child, nullptr, WNOHANG) < 0 && errno == ECHILD ? 1 : 12;
            }),
            1);
}

TEST(OnlyProcessLeft, CountsAChildWithoutAnExitSignal) {
  // A raw clone with exit signal 0: invisible to waitpid without __WALL.
  EXPECT_EQ(in_fresh_process([] {
              long child = ::syscall(SYS_clone, 0UL, nullptr, nullptr, nullptr, 0UL);
              if (child == 0) {
                ::pause();
                ::_exit(0);
              }
              if (child < 0) return 10;
              return kill_and_return(static_cast<pid_t>(child), only_process_left() ? 1 : 0);
            }),
            0);
}

}  // namespace
}  // namespace nsbox
