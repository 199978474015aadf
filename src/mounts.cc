#include "nsbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "nsbox/error.h"

namespace nsbox {
namespace {

constexpr unsigned long kNoDevSuid = MS_NOSUID | MS_NODEV;
constexpr unsigned long kAtimeFlags = MS_NOATIME | MS_NODIRATIME | MS_RELATIME | MS_STRICTATIME;

// Device nodes the sandbox gets, bound from the host: mknod is not allowed in
// a user namespace, and these are the harmless ones.
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

// Files of /proc that leak host kernel state or act on the host; each is
// hidden behind /dev/null. The host's boot arguments, and host-wide
// interrupt and disk counters that move with other tenants' runs, too.
constexpr const char* kMaskedProcFiles[] = {
    "/proc/kcore",
    "/proc/sysrq-trigger",
    "/proc/timer_list",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/kallsyms",
    "/proc/kmsg",
    "/proc/config.gz",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/kpagecgroup",
    "/proc/cmdline",
    "/proc/interrupts",
    "/proc/softirqs",
    "/proc/diskstats",
    // The host's disks, hardware and drivers (what kernel surfaces exist to
    // attack), and its free memory page by page: nothing a runtime reads.
    "/proc/partitions",
    "/proc/buddyinfo",
    "/proc/zoneinfo",
    "/proc/iomem",
    "/proc/ioports",
    "/proc/devices",
    "/proc/misc",
    "/proc/consoles",
    "/proc/crypto",
    "/proc/dma",
    // Every open file description lock on the host, whatever the reader's
    // pid namespace: host files' devices and inodes, and a channel between
    // runs (a lock's range is any 64-bit number a run chooses).
    "/proc/locks",
};
// Directories of /proc with host-wide knobs, hardware details or pressure
// figures; each is hidden behind an empty read-only tmpfs.
constexpr const char* kMaskedProcDirs[] = {"/proc/sys", "/proc/acpi", "/proc/scsi",   "/proc/irq",
                                           "/proc/bus", "/proc/fs",   "/proc/driver", "/proc/pressure"};

// Top-level rootfs entries nsbox provides itself.
constexpr const char* kProvidedTopLevel[] = {"proc", "dev", "tmp", "sys"};

struct TopLevelEntry {
  std::string name;
  unsigned char type;  // DT_DIR, DT_REG, DT_LNK
  std::string link;
};

std::vector<TopLevelEntry> list_top_level(int root_fd, const std::string& root) {
  int dup_fd = ::openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup_fd < 0) throw SysError("open rootfs", root, errno);
  DIR* dir = ::fdopendir(dup_fd);
  if (!dir) {
    int err = errno;
    ::close(dup_fd);
    throw SysError("read rootfs", root, err);
  }
  std::vector<TopLevelEntry> entries;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (std::find(std::begin(kProvidedTopLevel), std::end(kProvidedTopLevel), name) != std::end(kProvidedTopLevel))
      continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    TopLevelEntry entry{name, DT_UNKNOWN, {}};
    if (S_ISDIR(st.st_mode)) {
      entry.type = DT_DIR;
    } else if (S_ISREG(st.st_mode)) {
      entry.type = DT_REG;
    } else if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlinkat(::dirfd(dir), name.c_str(), buf, sizeof(buf) - 1);
      if (n < 0) continue;
      entry.type = DT_LNK;
      entry.link.assign(buf, static_cast<size_t>(n));
    } else {
      continue;  // sockets, fifos, devices: nothing a sandbox should get
    }
    entries.push_back(std::move(entry));
  }
  ::closedir(dir);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return entries;
}

size_t depth(const std::string& path) { return std::count(path.begin(), path.end(), '/'); }

// Whether `inside` exists in the rootfs, with no symlink on the way, as a
// directory (or, for want_dir false, a non-directory).
bool exists_in_rootfs(int root_fd, const std::string& inside, bool want_dir) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string rel = inside.substr(inside.find_first_not_of('/'));
  long fd = ::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof(how));
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(static_cast<int>(fd), &st) == 0 && S_ISDIR(st.st_mode) == want_dir && !S_ISLNK(st.st_mode);
  ::close(static_cast<int>(fd));
  return ok;
}

// One bind of the whole rootfs suffices when nothing has to be created in it.
bool every_target_exists(int root_fd, const RunSpec& spec) {
  for (const char* dir : {"/proc", "/dev", "/tmp"})
    if (!exists_in_rootfs(root_fd, dir, true)) return false;
  for (const auto& t : spec.tmpfs)
    if (!exists_in_rootfs(root_fd, t.target, true)) return false;
  for (const auto& b : spec.binds) {
    struct stat st {};
    if (::stat(b.source.c_str(), &st) != 0) return false;
    if (!exists_in_rootfs(root_fd, b.target, S_ISDIR(st.st_mode))) return false;
  }
  return true;
}

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

UniqueFd open_no_symlinks(const std::string& path, const std::string& what) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how));
  if (fd < 0) throw SysError("open " + what, path, errno);
  return UniqueFd(static_cast<int>(fd));
}

std::string openat2_problem() {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS;
  const long fd = ::syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return "";
  }
  // Opening / cannot fail for a reason of its own.
  return std::string("openat2(): ") + std::strerror(errno) +
         ": the kernel is older than 5.6, or nsbox runs under a seccomp "
         "filter that refuses it (systemd's RestrictSUIDSGID= or SystemCallFilter=, a container runtime's "
         "profile); nsbox opens the rootfs and every mount source with it, never following a symlink out";
}

namespace {

// An O_PATH descriptor of path below dir, resolved as `resolve` says.
int openat2_path(int dir, const char* path, uint64_t resolve) noexcept {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dir, path, &how, sizeof(how)));
}

// A spec mount already in the plan; bind is null for a tmpfs.
struct Placed {
  std::string target;
  const BindMount* bind;
};

// The host bind that target would be made in, if any: the deepest placed
// mount above it, when that is a host directory nsbox did not make.
const BindMount* host_bind_above(const std::vector<Placed>& placed, const std::string& target) {
  const Placed* deepest = nullptr;
  for (const auto& p : placed)
    if (target.rfind(p.target + "/", 0) == 0 && (!deepest || p.target.size() > deepest->target.size())) deepest = &p;
  return deepest && deepest->bind && !deepest->bind->source_is_the_runs ? deepest->bind : nullptr;
}

// A mount point inside a host bind must be there already: making it would
// write into the host's directory (and fails in a read-only one).
void require_mount_point_in(const BindMount& outer, const std::string& target) {
  const std::string rel = target.substr(outer.target.size() + 1);
  const UniqueFd source = open_no_symlinks(outer.source, "mount source");
  const UniqueFd point(
      openat2_path(source.get(), rel.c_str(), RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
  // Other errors (a symlink on the way) are the mount step's to report.
  if (!point && errno == ENOENT)
    throw SysError("mount target " + target,
                   "needs " + outer.source + "/" + rel + " (the mount on " + outer.target +
                       " is that host directory, and nsbox makes no directory in one): create it there",
                   ENOENT);
}

}  // namespace

void MountPlan::add(Step step) { steps_.push_back(std::move(step)); }

void MountPlan::finalize() {
  raw_.clear();
  raw_.reserve(steps_.size());
  for (const auto& s : steps_) {
    raw_.push_back(RawMountOp{s.kind, s.source_kind, s.source.c_str(), s.target.c_str(), s.fstype.c_str(),
                              s.data.c_str(), s.flags, s.remount_flags, s.create, s.optional});
  }
}

Masks proc_masks_for(const RunSpec& spec) {
  Masks out;
  out.dirs.assign(std::begin(kMaskedProcDirs), std::end(kMaskedProcDirs));
  out.files.assign(std::begin(kMaskedProcFiles), std::end(kMaskedProcFiles));
  for (const auto& m : spec.masks) {
    if (m.rfind("/proc/", 0) != 0 || std::find(out.dirs.begin(), out.dirs.end(), m) != out.dirs.end() ||
        std::find(out.files.begin(), out.files.end(), m) != out.files.end())
      continue;
    struct stat st {};
    bool is_dir = ::lstat(m.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    (is_dir ? out.dirs : out.files).push_back(m);
  }
  return out;
}

MountPlan MountPlan::for_spec(const RunSpec& spec) {
  MountPlan plan;
  plan.new_root_ = spec.rootfs;
  const std::string tmpfs_size = "size=" + std::to_string(spec.limits.tmpfs_bytes);
  const unsigned long root_locked = locked_mount_flags(spec.rootfs);
  const unsigned long read_only_bind = MS_REMOUNT | MS_BIND | MS_RDONLY | kNoDevSuid | root_locked;

  const UniqueFd root_fd = open_no_symlinks(spec.rootfs, "rootfs");

  // Nothing we mount may propagate back to the host.
  plan.add({.kind = MountKind::kMakePrivate, .target = "/", .flags = MS_REC | MS_PRIVATE});
  const bool overlay_is_root = every_target_exists(root_fd.get(), spec);
  // A new superblock of its own: no host submount comes along, and the flags
  // the host mount locks (noexec, atime) are kept by asking for them.
  plan.add({.kind = MountKind::kRootOverlay,
            .source = "rootfs",
            .target = spec.rootfs,
            .fstype = "overlay",
            .flags = MS_RDONLY | kNoDevSuid | (root_locked & ~kAtimeFlags)});
  if (!overlay_is_root) {
    plan.add({.kind = MountKind::kRootTmpfs,
              .source = "tmpfs",
              .target = spec.rootfs,
              .fstype = "tmpfs",
              .data = "mode=0755,size=1m,nr_inodes=4096",
              .flags = kNoDevSuid});
  }

  // The rootfs's top level, read-only, each entry on its own: not recursive,
  // so no host submount comes along.
  for (const auto& e : overlay_is_root ? std::vector<TopLevelEntry>{} : list_top_level(root_fd.get(), spec.rootfs)) {
    const std::string inside = "/" + e.name;
    if (e.type == DT_LNK) {
      plan.add({.kind = MountKind::kSymlink, .source = e.link, .target = inside});
      continue;
    }
    plan.add({.kind = MountKind::kBind,
              .source_kind = SourceKind::kRootfsEntry,
              .source = e.name,
              .target = inside,
              .flags = MS_BIND,
              .remount_flags = read_only_bind,
              .create = e.type == DT_DIR ? TargetCreate::kDirectory : TargetCreate::kFile});
  }

  plan.add({.kind = MountKind::kFilesystem,
            .source = "proc",
            .target = "/proc",
            .fstype = "proc",
            .flags = kNoDevSuid | MS_NOEXEC,
            .create = TargetCreate::kDirectory});

  plan.add({.kind = MountKind::kFilesystem,
            .source = "tmpfs",
            .target = "/dev",
            .fstype = "tmpfs",
            .data = "mode=0755,size=64k,nr_inodes=64",
            .flags = MS_NOSUID | MS_NOEXEC,
            .create = TargetCreate::kDirectory});
  // The host's own nodes: read-only binds, so that a run cannot change
  // their timestamps or modes (writing to the device still works).
  for (const char* dev : kDevices) {
    plan.add({.kind = MountKind::kBind,
              .source = std::string("/dev/") + dev,
              .target = std::string("/dev/") + dev,
              .flags = MS_BIND,
              .remount_flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              .create = TargetCreate::kFile});
  }
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd", .target = "/dev/fd"});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/0", .target = "/dev/stdin"});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/1", .target = "/dev/stdout"});
  plan.add({.kind = MountKind::kSymlink, .source = "/proc/self/fd/2", .target = "/dev/stderr"});
  plan.add({.kind = MountKind::kSymlink, .source = "pts/ptmx", .target = "/dev/ptmx"});
  plan.add({.kind = MountKind::kFilesystem,
            .source = "tmpfs",
            .target = "/dev/shm",
            .fstype = "tmpfs",
            .data = "mode=1777," + tmpfs_size,
            .flags = kNoDevSuid | MS_NOEXEC,
            .create = TargetCreate::kDirectory});
  plan.add({.kind = MountKind::kFilesystem,
            .source = "devpts",
            .target = "/dev/pts",
            .fstype = "devpts",
            // max: every devpts instance but the host's first draws on one
            // host-wide pool (kernel.pty.max - kernel.pty.reserve).
            .data = "newinstance,ptmxmode=0666,mode=0620,max=16",
            .flags = MS_NOSUID | MS_NOEXEC,
            .create = TargetCreate::kDirectory});
  // /dev itself becomes read-only once populated.
  plan.add({.kind = MountKind::kRemount, .target = "/dev", .flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC});

  plan.add({.kind = MountKind::kFilesystem,
            .source = "tmpfs",
            .target = "/tmp",
            .fstype = "tmpfs",
            .data = "mode=1777," + tmpfs_size,
            .flags = kNoDevSuid,
            .create = TargetCreate::kDirectory});

  // The spec's own mounts, parents before children.
  struct Pending {
    std::string target;
    bool is_bind;
    size_t index;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < spec.binds.size(); ++i) pending.push_back({spec.binds[i].target, true, i});
  for (size_t i = 0; i < spec.tmpfs.size(); ++i) pending.push_back({spec.tmpfs[i].target, false, i});
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return depth(a.target) < depth(b.target); });
  std::vector<Placed> placed;
  for (const auto& p : pending) {
    const BindMount* host_bind = host_bind_above(placed, p.target);
    if (host_bind) require_mount_point_in(*host_bind, p.target);
    placed.push_back({p.target, p.is_bind ? &spec.binds[p.index] : nullptr});
    if (p.is_bind) {
      const BindMount& b = spec.binds[p.index];
      const UniqueFd src = open_no_symlinks(b.source, "mount source");
      struct stat st {};
      if (::fstat(src.get(), &st) != 0) throw SysError("stat mount source", b.source, errno);
      const unsigned long locked = locked_mount_flags(b.source);
      unsigned long remount = MS_REMOUNT | MS_BIND | kNoDevSuid | locked;
      if (b.read_only) remount |= MS_RDONLY;
      if (b.noexec) remount |= MS_NOEXEC;
      plan.add({.kind = MountKind::kBind,
                .source_kind = SourceKind::kHostPath,
                .source = b.source,
                .target = b.target,
                .flags = MS_BIND,
                .remount_flags = remount,
                .create = host_bind             ? TargetCreate::kNone
                          : S_ISDIR(st.st_mode) ? TargetCreate::kDirectory
                                                : TargetCreate::kFile});
    } else {
      const TmpfsMount& t = spec.tmpfs[p.index];
      plan.add({.kind = MountKind::kFilesystem,
                .source = "tmpfs",
                .target = t.target,
                .fstype = "tmpfs",
                .data = "mode=1777,size=" + std::to_string(t.size_bytes),
                .flags = kNoDevSuid,
                .create = host_bind ? TargetCreate::kNone : TargetCreate::kDirectory});
    }
  }

  // Masks, after every mount, so that what is masked is what a run would
  // see there (a directory inside a host bind, a tmpfs nsbox made). A mask
  // of a missing path is a no-op. Without masks on /proc, a fork server's
  // run can mount a /proc of its own (the kernel refuses a new proc where
  // every proc is partly hidden); it masks that one itself, before any of
  // its code runs.
  std::vector<std::string> masks(std::begin(kMaskedProcFiles), std::end(kMaskedProcFiles));
  masks.insert(masks.end(), std::begin(kMaskedProcDirs), std::end(kMaskedProcDirs));
  for (const auto& m : spec.masks)
    if (std::find(masks.begin(), masks.end(), m) == masks.end()) masks.push_back(m);
  for (const auto& m : masks) {
    if (!spec.mask_proc && m.rfind("/proc/", 0) == 0) continue;
    // A file goes behind /dev/null (not nodev: it must open).
    plan.add({.kind = MountKind::kMask,
              .source = spec.rootfs + "/dev/null",
              .target = m,
              .fstype = "tmpfs",
              .data = "mode=0555,size=4k,nr_inodes=1",
              .flags = MS_RDONLY | kNoDevSuid | MS_NOEXEC,
              .remount_flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              .optional = true});
  }

  // The skeleton becomes read-only once populated (an overlay root was
  // mounted read-only, nosuid and nodev to begin with), then the switch.
  if (!overlay_is_root)
    plan.add({.kind = MountKind::kRemount, .target = "/", .flags = MS_REMOUNT | MS_RDONLY | kNoDevSuid});
  plan.add({.kind = MountKind::kPivotRoot, .target = spec.rootfs});
  plan.finalize();
  return plan;
}

// ---- Child side: raw syscalls only from here on. ----

namespace {

// "/proc/self/fd/N" into buf: mounting on that path acts on exactly the
// object the fd refers to, whatever happens to names in between.
void fd_path(int fd, char (&buf)[32]) noexcept {
  char digits[12];
  int n = 0;
  unsigned value = static_cast<unsigned>(fd);
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value && n < 11);
  const char prefix[] = "/proc/self/fd/";
  size_t len = sizeof(prefix) - 1;
  std::memcpy(buf, prefix, len);
  while (n > 0) buf[len++] = digits[--n];
  buf[len] = '\0';
}

// Opens component `name` under dir without following it if it is a symlink:
// a symlink anywhere in a target is refused with ELOOP.
int open_component(int dir, const char* name, bool want_dir) noexcept {
  int fd = ::openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC | (want_dir ? O_DIRECTORY : 0));
  if (fd >= 0) {
    struct stat st {};
    if (!want_dir && ::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      ::close(fd);
      errno = ELOOP;
      return -1;
    }
    return fd;
  }
  if (errno == ENOTDIR) {
    struct stat st {};
    if (::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) errno = ELOOP;
  }
  return -1;
}

// Walks the absolute inside path from root_fd to its parent directory,
// creating missing directories when create is set. *last gets the final
// component (empty for "/"). Returns an O_PATH fd of the parent or -1.
int resolve_parent(int root_fd, const char* path, bool create, char (&last)[256]) noexcept {
  int cur = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  last[0] = '\0';
  const char* p = path;
  while (cur >= 0) {
    while (*p == '/') ++p;
    const char* end = p;
    while (*end && *end != '/') ++end;
    size_t len = static_cast<size_t>(end - p);
    if (len == 0) return cur;
    if (len >= sizeof(last) || (len == 2 && p[0] == '.' && p[1] == '.')) {
      ::close(cur);
      errno = EINVAL;
      return -1;
    }
    std::memcpy(last, p, len);
    last[len] = '\0';
    const char* rest = end;
    while (*rest == '/') ++rest;
    if (*rest == '\0') return cur;  // last is the final component
    int next = open_component(cur, last, true);
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur, last, 0755) != 0 && errno != EEXIST) {
        ::close(cur);
        return -1;
      }
      next = open_component(cur, last, true);
    }
    int err = errno;
    ::close(cur);
    errno = err;
    cur = next;
    p = end;
  }
  return -1;
}

// Opens the target itself (O_PATH), creating it as asked.
int resolve_target(int root_fd, const char* path, TargetCreate create) noexcept {
  char last[256];
  int parent = resolve_parent(root_fd, path, create != TargetCreate::kNone, last);
  if (parent < 0) return -1;
  if (last[0] == '\0') return parent;  // the root itself
  if (create == TargetCreate::kDirectory) {
    if (::mkdirat(parent, last, 0755) != 0 && errno != EEXIST) {
      int err = errno;
      ::close(parent);
      errno = err;
      return -1;
    }
  } else if (create == TargetCreate::kFile) {
    int fd = ::openat(parent, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd >= 0) ::close(fd);
  }
  int fd = open_component(parent, last, create == TargetCreate::kDirectory);
  int err = errno;
  ::close(parent);
  errno = err;
  return fd;
}

// Opens a bind source as the op says; -1 for a plain source (use op.source).
int open_source(const RawMountOp& op, int rootfs_fd) noexcept {
  switch (op.source_kind) {
    case SourceKind::kHostPath:
      return openat2_path(AT_FDCWD, op.source, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    case SourceKind::kRootfsEntry:
      return openat2_path(rootfs_fd, op.source, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    case SourceKind::kPlain:
      break;
  }
  errno = 0;
  return -1;
}

int bind(const RawMountOp& op, const char* target_path, int rootfs_fd, const char** step) noexcept {
  int src_fd = open_source(op, rootfs_fd);
  if (src_fd < 0 && errno != 0) return *step = "open mount source", errno;
  char src_path[32];
  if (src_fd >= 0) fd_path(src_fd, src_path);
  int rc = ::mount(src_fd >= 0 ? src_path : op.source, target_path, nullptr, op.flags, nullptr);
  int err = errno;
  if (src_fd >= 0) ::close(src_fd);
  if (rc != 0) return *step = "bind mount", err;
  return 0;
}

// The new mount now covers the target: remount it by the same name.
int remount_bind(const RawMountOp& op, int root_fd, const char** step) noexcept {
  if (!op.remount_flags) return 0;
  int top = resolve_target(root_fd, op.target, TargetCreate::kNone);
  if (top < 0) return *step = "remount", errno;
  char top_path[32];
  fd_path(top, top_path);
  int rc = ::mount(nullptr, top_path, nullptr, op.remount_flags, nullptr);
  int err = errno;
  ::close(top);
  return rc == 0 ? 0 : (*step = "remount", err);
}

// What the mask covers is looked at now, when every mount under it is in place.
int mask(const RawMountOp& op, int target, const char* path, int root_fd, const char** step) noexcept {
  struct stat st {};
  if (::fstat(target, &st) != 0) return *step = "stat mask target", errno;
  if (S_ISDIR(st.st_mode))
    return ::mount("tmpfs", path, op.fstype, op.flags, op.data) == 0 ? 0 : (*step = "mount mask", errno);
  if (::mount(op.source, path, nullptr, MS_BIND, nullptr) != 0) return *step = "bind mask", errno;
  return remount_bind(op, root_fd, step);
}

int apply_one(const RawMountOp& op, int root_fd, int rootfs_fd, const char** step) noexcept {
  if (op.kind == MountKind::kSymlink) {
    char last[256];
    int parent = resolve_parent(root_fd, op.target, true, last);
    if (parent < 0) return *step = "resolve", errno;
    int rc = ::symlinkat(op.source, parent, last);
    int err = errno;
    ::close(parent);
    return rc == 0 ? 0 : (*step = "symlink", err);
  }
  if (op.kind == MountKind::kPivotRoot) {
    // pivot_root(".", ".") stacks the old root under the new one; detaching
    // it leaves no path back to the host tree.
    if (::fchdir(root_fd) != 0) return *step = "chdir", errno;
    if (::syscall(SYS_pivot_root, ".", ".") != 0) return *step = "pivot_root", errno;
    if (::umount2(".", MNT_DETACH) != 0) return *step = "detach old root", errno;
    if (::chdir("/") != 0) return *step = "chdir", errno;
    return 0;
  }
  int target = resolve_target(root_fd, op.target, op.create);
  if (target < 0) return *step = "resolve mount target", errno;
  char path[32];
  fd_path(target, path);
  int rc = 0;
  switch (op.kind) {
    case MountKind::kBind:
      if (int bind_err = bind(op, path, rootfs_fd, step)) {
        rc = -1;
        errno = bind_err;
      } else if (int remount_err = remount_bind(op, root_fd, step)) {
        rc = -1;
        errno = remount_err;
      }
      break;
    case MountKind::kFilesystem:
      rc = ::mount(op.source, path, op.fstype, op.flags, op.data);
      if (rc != 0) *step = "mount";
      break;
    case MountKind::kRemount:
      rc = ::mount(nullptr, path, nullptr, op.flags, nullptr);
      if (rc != 0) *step = "remount";
      break;
    case MountKind::kMask:
      if (int mask_err = mask(op, target, path, root_fd, step)) {
        rc = -1;
        errno = mask_err;
      }
      break;
    default:
      rc = -1;
      errno = EINVAL;
      *step = "mount plan";
  }
  int err = errno;
  ::close(target);
  return rc == 0 ? 0 : err;
}

// The top mount at the rootfs path, opened without following a symlink.
int open_new_root(const char* path) noexcept {
  return openat2_path(AT_FDCWD, path, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

// Mounts the read-only overlay of the rootfs on the rootfs's own path. Its
// layers are named by /proc/self/fd paths, which is all mountinfo will show of
// them. Overlay wants two layers without an upper one: the second is an
// empty read-only tmpfs, mounted on the same path first and left underneath
// (overlay holds private clones of its layers' mounts).
int mount_rootfs_overlay(const RawMountOp& op, const char** step) noexcept {
  int rootfs = open_new_root(op.target);
  if (rootfs < 0) return *step = "open rootfs", errno;
  char rootfs_path[32], empty_path[32];
  fd_path(rootfs, rootfs_path);
  if (::mount("tmpfs", rootfs_path, "tmpfs", MS_RDONLY | kNoDevSuid | MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1") !=
      0) {
    int err = errno;
    ::close(rootfs);
    return *step = "mount empty overlay layer", err;
  }
  int empty = open_new_root(op.target);
  if (empty < 0) {
    int err = errno;
    ::close(rootfs);
    return *step = "open empty overlay layer", err;
  }
  fd_path(empty, empty_path);
  char data[96] = "lowerdir=";
  size_t len = std::strlen(data);
  for (const char* part : {static_cast<const char*>(rootfs_path), ":", static_cast<const char*>(empty_path)}) {
    size_t n = std::strlen(part);
    std::memcpy(data + len, part, n);
    len += n;
  }
  data[len] = '\0';
  int rc = ::mount(op.source, empty_path, op.fstype, op.flags, data);
  int err = errno;
  ::close(rootfs);
  ::close(empty);
  return rc == 0 ? 0 : (*step = "mount rootfs overlay", err);
}

}  // namespace

int apply_mount_plan(const RawMountOp* ops, size_t count, const char** step, const char** object) noexcept {
  int root_fd = -1;    // the new root (the overlay, or the skeleton tmpfs over it)
  int rootfs_fd = -1;  // the overlay of the rootfs
  int result = 0;
  for (size_t i = 0; i < count && result == 0; ++i) {
    const RawMountOp& op = ops[i];
    *object = op.target;
    if (op.kind == MountKind::kMakePrivate) {
      if (::mount(nullptr, op.target, nullptr, op.flags, nullptr) != 0) *step = "make-private", result = errno;
      continue;
    }
    if (op.kind == MountKind::kRootOverlay) {
      result = mount_rootfs_overlay(op, step);
      if (result != 0) continue;
      rootfs_fd = open_new_root(op.target);
      root_fd = rootfs_fd < 0 ? -1 : ::fcntl(rootfs_fd, F_DUPFD_CLOEXEC, 0);
      if (root_fd < 0) *step = "open new root", result = errno;
      continue;
    }
    if (op.kind == MountKind::kRootTmpfs) {
      if (root_fd < 0) {
        *step = "mount plan";
        result = EINVAL;
        continue;
      }
      char overlay_path[32];
      fd_path(root_fd, overlay_path);
      if (::mount(op.source, overlay_path, op.fstype, op.flags, op.data) != 0) {
        *step = "mount root tmpfs";
        result = errno;
        continue;
      }
      ::close(root_fd);
      root_fd = open_new_root(op.target);
      if (root_fd < 0) *step = "open new root", result = errno;
      continue;
    }
    if (root_fd < 0) {
      *step = "mount plan";
      result = EINVAL;
      continue;
    }
    int err = apply_one(op, root_fd, rootfs_fd, step);
    if (err == ENOENT && op.optional) err = 0;
    result = err;
  }
  if (root_fd >= 0) ::close(root_fd);
  if (rootfs_fd >= 0) ::close(rootfs_fd);
  return result;
}

std::string unescape_mountinfo(std::string_view field) {
  auto octal = [&](size_t at) { return at < field.size() && field[at] >= '0' && field[at] <= '7'; };
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

}  // namespace nsbox
