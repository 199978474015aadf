#include "nsbox/mounts.h"

#include <sys/mount.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace nsbox {
namespace {

RunSpec spec_with_root(const std::string& root) {
  RunSpec spec;
  spec.rootfs = root;
  spec.argv = {"/bin/true"};
  spec.limits.tmpfs_bytes = 8 << 20;
  return spec;
}

const MountPlan::Step* find_step(const MountPlan& plan, MountKind kind, const std::string& target) {
  for (const auto& s : plan.steps())
    if (s.kind == kind && s.target == target) return &s;
  return nullptr;
}

TEST(MountPlan, StartsPrivateAndEndsWithPivotRoot) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/"));
  ASSERT_GE(plan.steps().size(), 3u);
  EXPECT_EQ(plan.steps().front().kind, MountKind::kMakePrivate);
  EXPECT_EQ(plan.steps().front().flags, static_cast<unsigned long>(MS_REC | MS_PRIVATE));
  EXPECT_EQ(plan.steps().back().kind, MountKind::kPivotRoot);
}

TEST(MountPlan, RootfsIsBoundReadOnlyWithoutSubmounts) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  const auto* root = find_step(plan, MountKind::kBind, "/usr");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->flags & MS_REC, 0u) << "a recursive bind would bring host submounts along";
  EXPECT_NE(root->remount_flags & MS_RDONLY, 0u);
  EXPECT_NE(root->remount_flags & MS_NOSUID, 0u);
  EXPECT_NE(root->remount_flags & MS_NODEV, 0u);
}

TEST(MountPlan, TmpIsCappedAndProcIsFresh) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  const auto* tmp = find_step(plan, MountKind::kFilesystem, "/usr/tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_EQ(tmp->fstype, "tmpfs");
  EXPECT_NE(tmp->data.find("size=8388608"), std::string::npos);
  const auto* proc = find_step(plan, MountKind::kFilesystem, "/usr/proc");
  ASSERT_NE(proc, nullptr);
  EXPECT_EQ(proc->fstype, "proc");
  EXPECT_NE(proc->flags & MS_NOEXEC, 0u);
}

TEST(MountPlan, MasksHostKnobsInProc) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  EXPECT_NE(find_step(plan, MountKind::kBind, "/usr/proc/kcore"), nullptr);
  EXPECT_NE(find_step(plan, MountKind::kBind, "/usr/proc/sysrq-trigger"), nullptr);
  const auto* sys = find_step(plan, MountKind::kFilesystem, "/usr/proc/sys");
  ASSERT_NE(sys, nullptr);
  EXPECT_NE(sys->flags & MS_RDONLY, 0u);
}

TEST(MountPlan, DevHasOnlyHarmlessDevices) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  std::vector<std::string> devices;
  for (const auto& s : plan.steps())
    if (s.kind == MountKind::kBind && s.source.rfind("/dev/", 0) == 0) devices.push_back(s.source);
  std::sort(devices.begin(), devices.end());
  EXPECT_EQ(devices, (std::vector<std::string>{"/dev/full", "/dev/null", "/dev/random", "/dev/tty",
                                               "/dev/urandom", "/dev/zero"}));
}

TEST(MountPlan, RawViewMatchesSteps) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  ASSERT_EQ(plan.raw().size(), plan.steps().size());
  for (size_t i = 0; i < plan.raw().size(); ++i) {
    EXPECT_STREQ(plan.raw()[i].target, plan.steps()[i].target.c_str());
    EXPECT_EQ(plan.raw()[i].flags, plan.steps()[i].flags);
  }
}

TEST(LockedMountFlags, MissingPathIsAnErrorNamingIt) {
  try {
    locked_mount_flags("/nonexistent/nsbox");
    FAIL() << "expected SysError";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("statvfs /nonexistent/nsbox"), std::string::npos);
  }
}

}  // namespace
}  // namespace nsbox
