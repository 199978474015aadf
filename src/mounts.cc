#include "nsbox/mounts.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "nsbox/error.h"

namespace nsbox {
namespace {

constexpr unsigned long kNoDevSuid = MS_NOSUID | MS_NODEV;

// Device nodes the sandbox gets, bound from the host: mknod is not allowed in
// a user namespace, and these are the harmless ones.
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

// Files of /proc that leak host kernel state or act on the host; each is
// hidden behind /dev/null.
constexpr const char* kMaskedProcFiles[] = {
    "kcore", "sysrq-trigger", "timer_list", "keys", "latency_stats", "sched_debug",
    "kallsyms", "kmsg", "config.gz", "kpagecount", "kpageflags", "kpagecgroup",
};
// Directories of /proc with host-wide knobs or hardware details; each is
// hidden behind an empty read-only tmpfs.
constexpr const char* kMaskedProcDirs[] = {"sys", "acpi", "scsi", "irq", "bus", "fs", "driver"};

}  // namespace

unsigned long locked_mount_flags(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) throw SysError("statvfs", path, errno);
  unsigned long flags = 0;
  if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (!(st.f_flag & (ST_NOATIME | ST_RELATIME))) flags |= MS_STRICTATIME;
  return flags;
}

void MountPlan::add(Step step) { steps_.push_back(std::move(step)); }

void MountPlan::finalize() {
  raw_.clear();
  raw_.reserve(steps_.size());
  for (const auto& s : steps_) {
    raw_.push_back(RawMountOp{s.kind, s.source.c_str(), s.target.c_str(), s.fstype.c_str(),
                              s.data.c_str(), s.flags, s.remount_flags, s.optional});
  }
}

MountPlan MountPlan::for_spec(const RunSpec& spec) {
  MountPlan plan;
  const std::string root = spec.rootfs;
  const auto at = [&](const std::string& inside) { return root + inside; };
  const std::string tmpfs_size = "size=" + std::to_string(spec.limits.tmpfs_bytes);

  // Nothing we mount may propagate back to the host.
  plan.add({.kind = MountKind::kMakePrivate, .target = "/", .flags = MS_REC | MS_PRIVATE});

  // The root tree, read-only. Not recursive: no host submount comes along.
  plan.add({.kind = MountKind::kBind, .source = root, .target = root, .flags = MS_BIND,
            .remount_flags = MS_REMOUNT | MS_BIND | MS_RDONLY | kNoDevSuid |
                             locked_mount_flags(root)});

  plan.add({.kind = MountKind::kFilesystem, .source = "proc", .target = at("/proc"),
            .fstype = "proc", .flags = kNoDevSuid | MS_NOEXEC});

  plan.add({.kind = MountKind::kFilesystem, .source = "tmpfs", .target = at("/dev"),
            .fstype = "tmpfs", .data = "mode=0755,size=64k,nr_inodes=64",
            .flags = MS_NOSUID | MS_NOEXEC});
  for (const char* dev : kDevices) {
    plan.add({.kind = MountKind::kTouch, .target = at("/dev/") + dev});
    plan.add({.kind = MountKind::kBind, .source = std::string("/dev/") + dev,
              .target = at("/dev/") + dev, .flags = MS_BIND});
  }
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd", .target = at("/dev/fd")});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/0", .target = at("/dev/stdin")});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/1", .target = at("/dev/stdout")});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/2", .target = at("/dev/stderr")});
  plan.add({.kind = MountKind::kSymlink, .source = "pts/ptmx", .target = at("/dev/ptmx")});
  plan.add({.kind = MountKind::kMkdir, .target = at("/dev/shm")});
  plan.add({.kind = MountKind::kFilesystem, .source = "tmpfs", .target = at("/dev/shm"),
            .fstype = "tmpfs", .data = "mode=1777," + tmpfs_size,
            .flags = kNoDevSuid | MS_NOEXEC});
  plan.add({.kind = MountKind::kMkdir, .target = at("/dev/pts")});
  plan.add({.kind = MountKind::kFilesystem, .source = "devpts", .target = at("/dev/pts"),
            .fstype = "devpts", .data = "newinstance,ptmxmode=0666,mode=0620",
            .flags = MS_NOSUID | MS_NOEXEC});
  // /dev itself becomes read-only once populated.
  plan.add({.kind = MountKind::kRemount, .target = at("/dev"),
            .flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC});

  plan.add({.kind = MountKind::kFilesystem, .source = "tmpfs", .target = at("/tmp"),
            .fstype = "tmpfs", .data = "mode=1777," + tmpfs_size, .flags = kNoDevSuid});

  for (const char* file : kMaskedProcFiles) {
    plan.add({.kind = MountKind::kBind, .source = at("/dev/null"),
              .target = at("/proc/") + file, .flags = MS_BIND,
              // Not nodev: the mask is the /dev/null device and must open.
              .remount_flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              .optional = true});
  }
  for (const char* dir : kMaskedProcDirs) {
    plan.add({.kind = MountKind::kFilesystem, .source = "tmpfs", .target = at("/proc/") + dir,
              .fstype = "tmpfs", .data = "mode=0555,size=4k,nr_inodes=1",
              .flags = MS_RDONLY | kNoDevSuid | MS_NOEXEC, .optional = true});
  }

  plan.add({.kind = MountKind::kPivotRoot, .target = root});
  plan.finalize();
  return plan;
}

int apply_mount_op(const RawMountOp& op, const char** step_name) noexcept {
  auto fail = [&](const char* step) {
    int err = errno;
    *step_name = step;
    if (op.optional && err == ENOENT) return 0;
    return err;
  };
  switch (op.kind) {
    case MountKind::kMakePrivate:
      if (::mount(nullptr, op.target, nullptr, op.flags, nullptr) != 0) return fail("make-private");
      return 0;
    case MountKind::kBind:
      if (::mount(op.source, op.target, nullptr, op.flags, nullptr) != 0) return fail("bind mount");
      if (op.remount_flags &&
          ::mount(nullptr, op.target, nullptr, op.remount_flags, nullptr) != 0)
        return fail("remount read-only");
      return 0;
    case MountKind::kFilesystem:
      if (::mount(op.source, op.target, op.fstype, op.flags, op.data) != 0) return fail("mount");
      return 0;
    case MountKind::kRemount:
      if (::mount(nullptr, op.target, nullptr, op.flags, nullptr) != 0) return fail("remount");
      return 0;
    case MountKind::kMkdir:
      if (::mkdir(op.target, 0755) != 0 && errno != EEXIST) return fail("mkdir");
      return 0;
    case MountKind::kTouch: {
      int fd = ::open(op.target, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
      if (fd < 0) return fail("create");
      ::close(fd);
      return 0;
    }
    case MountKind::kSymlink:
      if (::symlink(op.source, op.target) != 0) return fail("symlink");
      return 0;
    case MountKind::kPivotRoot:
      // pivot_root(".", ".") stacks the old root under the new one; detaching
      // it leaves no path back to the host tree.
      if (::chdir(op.target) != 0) return fail("chdir");
      if (::syscall(SYS_pivot_root, ".", ".") != 0) return fail("pivot_root");
      if (::umount2(".", MNT_DETACH) != 0) return fail("detach old root");
      if (::chdir("/") != 0) return fail("chdir");
      return 0;
  }
  *step_name = "mount plan";
  return EINVAL;
}

}  // namespace nsbox
