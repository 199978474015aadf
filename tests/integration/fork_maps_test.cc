// rootfs/forkmaps.c, the Node fork server's step before each run is forked:
// a mapping advised MADV_DONTFORK (as V8 advises all it maps) must reach
// the forked child, whatever /proc/self/maps calls it. Each case runs in a
// child of its own (it moves the program break), which forks a grandchild
// that reads the area: first without the step (it must die, or the case
// proves nothing), then with it.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "forkinit.h"

namespace {

constexpr size_t kSize = 64 * 1024;
constexpr char kFill = 42;

enum CaseExit {
  kCopied = 0,
  kCopiedWithoutTheStep = 10,  // the area was never DONTFORK
  kStepFailed = 11,
  kMissingAfterTheStep = 12,  // the bug: the child has no such pages
  kSetupFailed = 13,
  kUnsupported = 14,
};

enum ChildRead { kRead, kNotRead, kNoChild };

// Whether a forked child can read every page of `area` as the parent wrote it.
ChildRead child_read(const char* area) {
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);            // a sanitizer's handler would exit instead
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // and no core of the test binary
    for (size_t i = 0; i < kSize; i += 4096)
      if (static_cast<const volatile char*>(area)[i] != kFill) _exit(1);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return kNoChild;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? kRead : kNotRead;
}

// In a child: `make_area` maps an area advised MADV_DONTFORK; its exit says
// what fork made of it before and after the fork server's step.
int case_exit(const std::function<char*()>& make_area) {
  const pid_t pid = fork();
  if (pid == 0) {
    char* area = make_area();
    if (!area) _exit(errno == EINVAL ? kUnsupported : kSetupFailed);
    std::memset(area, kFill, kSize);
    if (madvise(area, kSize, MADV_DONTFORK) != 0) _exit(kSetupFailed);
    const ChildRead without_the_step = child_read(area);
    if (without_the_step != kNotRead) _exit(without_the_step == kRead ? kCopiedWithoutTheStep : kSetupFailed);
    nsbox_failed_step failed{};
    if (nsbox_allow_fork_of_anonymous_mappings(&failed) != 0) _exit(kStepFailed);
    const ChildRead with_the_step = child_read(area);
    if (with_the_step == kNoChild) _exit(kSetupFailed);
    _exit(with_the_step == kRead ? kCopied : kMissingAfterTheStep);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

char* anonymous_area(void* at, int extra_flags) {
  void* area = mmap(at, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  return area == MAP_FAILED ? nullptr : static_cast<char*>(area);
}

TEST(ForkMaps, AnUnnamedMappingIsCopied) {
  EXPECT_EQ(case_exit([] { return anonymous_area(nullptr, 0); }), kCopied);
}

// Linux 6.1 (the cgroup v2 guest's kernel) names a mapping that starts at a
// page-aligned program break "[heap]": the old step skipped named mappings,
// and this case fails there with it (kMissingAfterTheStep). Newer kernels
// leave it unnamed.
TEST(ForkMaps, AMappingAtTheProgramBreakIsCopied) {
  EXPECT_EQ(case_exit([] {
              const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
              const auto brk = reinterpret_cast<uintptr_t>(sbrk(0));
              const uintptr_t aligned = (brk + page - 1) & ~(page - 1);
              if (sbrk(static_cast<intptr_t>(aligned - brk)) == reinterpret_cast<void*>(-1))
                return static_cast<char*>(nullptr);
              char* area = anonymous_area(reinterpret_cast<void*>(aligned), MAP_FIXED_NOREPLACE);
              if (area && reinterpret_cast<uintptr_t>(area) != aligned) area = nullptr;
              return area;
            }),
            kCopied);
}

// A name given with PR_SET_VMA_ANON_NAME shows as "[anon:NAME]".
TEST(ForkMaps, ANamedAnonymousMappingIsCopied) {
  const int exit = case_exit([] {
    char* area = anonymous_area(nullptr, 0);
    if (area && prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, area, kSize, "nsbox-test") != 0)
      return static_cast<char*>(nullptr);
    return area;
  });
  if (exit == kUnsupported) GTEST_SKIP() << "this kernel has no anonymous mapping names (CONFIG_ANON_VMA_NAME)";
  EXPECT_EQ(exit, kCopied);
}

}  // namespace
