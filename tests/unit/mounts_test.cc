#include "nsbox/mounts.h"
#include "nsbox/error.h"

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

TEST(MountPlan, RootfsEntriesAreBoundReadOnlyWithoutSubmounts) {
  // /usr as a "rootfs": its top-level entries (bin, lib, share, ...) are bound.
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  const auto* bin = find_step(plan, MountKind::kBind, "/bin");
  ASSERT_NE(bin, nullptr);
  EXPECT_EQ(bin->source_kind, SourceKind::kRootfsEntry);
  EXPECT_EQ(bin->source, "bin");
  EXPECT_EQ(bin->flags & MS_REC, 0u) << "a recursive bind would bring host submounts along";
  EXPECT_NE(bin->remount_flags & MS_RDONLY, 0u);
  EXPECT_NE(bin->remount_flags & MS_NOSUID, 0u);
  EXPECT_NE(bin->remount_flags & MS_NODEV, 0u);
  EXPECT_EQ(find_step(plan, MountKind::kBind, "/proc"), nullptr) << "proc is nsbox's own";
}

TEST(MountPlan, RootfsWithEveryTargetIsOneReadOnlyOverlay) {
  // / has /proc, /dev and /tmp: the overlay is the new root, no skeleton.
  RunSpec spec = spec_with_root("/");
  spec.binds = {{"/etc", "/mnt", true, false}};
  MountPlan plan = MountPlan::for_spec(spec);
  EXPECT_EQ(plan.steps()[1].kind, MountKind::kRootOverlay);
  EXPECT_EQ(plan.steps()[1].fstype, "overlay");
  EXPECT_NE(plan.steps()[1].flags & MS_RDONLY, 0u);
  EXPECT_NE(plan.steps()[1].flags & MS_NODEV, 0u);
  EXPECT_EQ(find_step(plan, MountKind::kRootTmpfs, "/"), nullptr) << "no skeleton";
  EXPECT_NE(plan.steps()[1].flags & MS_NOSUID, 0u);
  EXPECT_EQ(find_step(plan, MountKind::kBind, "/usr"), nullptr);
  EXPECT_EQ(find_step(plan, MountKind::kRemount, "/"), nullptr) << "the overlay is read-only from the start";
  EXPECT_EQ(plan.steps().back().kind, MountKind::kPivotRoot);
}

TEST(MountPlan, NewRootIsATmpfsMadeReadOnlyBeforePivot) {
  // /usr has no /proc: the skeleton is needed to create the mount points.
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  EXPECT_EQ(plan.steps()[1].kind, MountKind::kRootOverlay);
  EXPECT_EQ(plan.steps()[2].kind, MountKind::kRootTmpfs);
  EXPECT_EQ(plan.steps()[2].target, "/usr");
  const auto& before_pivot = plan.steps()[plan.steps().size() - 2];
  EXPECT_EQ(before_pivot.kind, MountKind::kRemount);
  EXPECT_EQ(before_pivot.target, "/");
  EXPECT_NE(before_pivot.flags & MS_RDONLY, 0u);
}

TEST(MountPlan, SpecBindsComeAfterTheSystemMountsParentsFirst) {
  RunSpec spec = spec_with_root("/usr");
  spec.binds = {{"/etc", "/data/lib", true, false}, {"/var", "/data", false, true}};
  MountPlan plan = MountPlan::for_spec(spec);
  size_t data = 0, deep = 0, tmp = 0;
  for (size_t i = 0; i < plan.steps().size(); ++i) {
    if (plan.steps()[i].target == "/data") data = i;
    if (plan.steps()[i].target == "/data/lib") deep = i;
    if (plan.steps()[i].target == "/tmp") tmp = i;
  }
  ASSERT_TRUE(data && deep && tmp);
  EXPECT_LT(tmp, data);
  EXPECT_LT(data, deep);
  const auto& rw = plan.steps()[data];
  EXPECT_EQ(rw.source_kind, SourceKind::kHostPath);
  EXPECT_EQ(rw.remount_flags & MS_RDONLY, 0u);
  EXPECT_NE(rw.remount_flags & MS_NOEXEC, 0u);
  EXPECT_NE(plan.steps()[deep].remount_flags & MS_RDONLY, 0u);
  EXPECT_EQ(rw.create, TargetCreate::kDirectory);
  // /data/lib is /var/lib on the host: it must be there, never made.
  EXPECT_EQ(plan.steps()[deep].create, TargetCreate::kNone);
}

TEST(MountPlan, AMountPointMissingFromAHostBindIsRefusedNotMade) {
  RunSpec spec = spec_with_root("/usr");
  spec.binds = {{"/var", "/data", false, false}, {"/etc", "/data/nsbox-no-such-dir/x", true, false}};
  spec.tmpfs = {{"/data/nsbox-no-such-tmp", 4096}};
  for (int which = 0; which < 2; ++which) {
    RunSpec one = spec;
    if (which == 0)
      one.tmpfs.clear();
    else
      one.binds.pop_back();
    const std::string target = which == 0 ? "/data/nsbox-no-such-dir/x" : "/data/nsbox-no-such-tmp";
    try {
      MountPlan::for_spec(one);
      FAIL() << "expected a refusal for " << target;
    } catch (const SysError& e) {
      EXPECT_EQ(e.err(), ENOENT);
      EXPECT_NE(std::string(e.what()).find("mount target " + target + " needs /var" + target.substr(5)),
                std::string::npos)
          << e.what();
    }
  }
  // Below a directory nsbox made for the run (the workspace) it may be made.
  spec.binds[0].source_is_the_runs = true;
  MountPlan plan = MountPlan::for_spec(spec);
  const auto* inner = find_step(plan, MountKind::kBind, "/data/nsbox-no-such-dir/x");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->create, TargetCreate::kDirectory);
}

TEST(MountPlan, SymlinkedBindSourceIsRefused) {
  RunSpec spec = spec_with_root("/usr");
  spec.binds = {{"/proc/self/root/etc", "/data", true, false}};
  try {
    MountPlan::for_spec(spec);
    FAIL() << "expected SysError";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("open mount source /proc/self/root/etc"), std::string::npos) << e.what();
  }
}

TEST(MountPlan, TmpIsCappedAndProcIsFresh) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  const auto* tmp = find_step(plan, MountKind::kFilesystem, "/tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_EQ(tmp->fstype, "tmpfs");
  EXPECT_NE(tmp->data.find("size=8388608"), std::string::npos);
  const auto* proc = find_step(plan, MountKind::kFilesystem, "/proc");
  ASSERT_NE(proc, nullptr);
  EXPECT_EQ(proc->fstype, "proc");
  EXPECT_NE(proc->flags & MS_NOEXEC, 0u);
}

TEST(MountPlan, MasksHostKnobsInProc) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  EXPECT_NE(find_step(plan, MountKind::kMask, "/proc/kcore"), nullptr);
  EXPECT_NE(find_step(plan, MountKind::kMask, "/proc/sysrq-trigger"), nullptr);
  const auto* sys = find_step(plan, MountKind::kMask, "/proc/sys");
  ASSERT_NE(sys, nullptr);
  EXPECT_NE(sys->flags & MS_RDONLY, 0u);
  EXPECT_NE(sys->remount_flags & MS_RDONLY, 0u);
}

TEST(MountPlan, DevHasOnlyHarmlessDevices) {
  MountPlan plan = MountPlan::for_spec(spec_with_root("/usr"));
  std::vector<std::string> devices;
  for (const auto& s : plan.steps())
    if (s.kind == MountKind::kBind && s.target.rfind("/dev/", 0) == 0) devices.push_back(s.source);
  std::sort(devices.begin(), devices.end());
  EXPECT_EQ(devices, (std::vector<std::string>{"/dev/full", "/dev/null", "/dev/random", "/dev/tty", "/dev/urandom",
                                               "/dev/zero"}));
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

// What the kernel escapes in mountinfo's paths comes back as it was; a
// backslash not followed by three octal digits is left as it is.
TEST(Mountinfo, PathFieldsAreUnescaped) {
  EXPECT_EQ(unescape_mountinfo("/tmp/real\\040dir/nsbox-run-1"), "/tmp/real dir/nsbox-run-1");
  EXPECT_EQ(unescape_mountinfo("/a\\011b\\012c\\134d"), "/a\tb\nc\\d");
  EXPECT_EQ(unescape_mountinfo("/sys/fs/cgroup/memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(unescape_mountinfo("/x\\08y\\04"), "/x\\08y\\04");
}

}  // namespace
}  // namespace nsbox
