// The mount plan: every mount of the sandbox's filesystem view, computed by the
// supervisor before clone and replayed by the child with raw syscalls.
//
// The rootfs is reached through a read-only overlay of it mounted on its own
// path (private to the sandbox's mount namespace): a bind would show the
// rootfs's host path, block device and host fs options in the sandbox's
// /proc/self/mountinfo; the overlay shows only "lowerdir=/proc/self/fd/N".
// That overlay is the new root when every mount target exists in it (the
// common case); otherwise a small tmpfs laid over it into which the rootfs's
// top-level entries are bound read-only, so missing targets can be created
// at the top level. Either way every target is resolved component by
// component from the new root without following a symlink, so nothing
// planted in the rootfs or in a rw mount can redirect a mount onto the host.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nsbox/run_spec.h"
#include "nsbox/unique_fd.h"

namespace nsbox {

enum class MountKind {
  kMakePrivate,  // mount --make-rprivate /
  kRootOverlay,  // the read-only overlay of the rootfs, mounted on the rootfs path
  kRootTmpfs,    // the tmpfs skeleton of the new root, mounted over that overlay
  kBind,         // bind source on target (not recursive), then remount_flags if set
  kFilesystem,   // mount fstype on target with flags and data (proc, tmpfs, devpts)
  kRemount,      // change flags of the mount at target
  kMask,         // hide target: a directory behind an empty read-only tmpfs (fstype, data, flags),
                 // anything else behind source (/dev/null) bound read-only; decided when mounted
  kSymlink,      // symlink source -> target
  kPivotRoot,    // make the new root the root and detach the old one
};

// How the child finds a bind's source. Sources are opened by the child itself
// (an fd opened by the supervisor belongs to the host's mount namespace and
// cannot be bound in the sandbox's), without following any symlink.
enum class SourceKind {
  kPlain,        // source is used as given (fs names, nsbox's own /dev nodes)
  kHostPath,     // an absolute host path: openat2(RESOLVE_NO_SYMLINKS)
  kRootfsEntry,  // a name below the rootfs: openat2(RESOLVE_BENEATH|NO_SYMLINKS)
};

// What to create at a missing target before mounting on it.
enum class TargetCreate { kNone, kDirectory, kFile };

// Raw view handed to the child: pointers into a MountPlan that outlives clone.
struct RawMountOp {
  MountKind kind;
  SourceKind source_kind;
  const char* source;
  const char* target;  // path inside the sandbox (absolute), or the root for kRootTmpfs
  const char* fstype;
  const char* data;
  unsigned long flags;
  unsigned long remount_flags;  // 0: no remount after a bind
  TargetCreate create;
  bool optional;  // a missing target or source is skipped, not fatal
};

// The paths of /proc a sandbox hides: nsbox's built-in files and
// directories and the spec's masks below /proc, split by what they are (a
// fresh proc of the host's kernel has the host's shape). A fork server's run
// mounts a /proc of its own and masks these in it.
struct Masks {
  std::vector<std::string> files;
  std::vector<std::string> dirs;
};
Masks proc_masks_for(const RunSpec& spec);

// A path field of /proc/self/mountinfo as it is: the kernel writes space,
// tab, newline and backslash as a backslash and three octal digits.
std::string unescape_mountinfo(std::string_view field);

class MountPlan {
 public:
  struct Step {
    MountKind kind;
    SourceKind source_kind = SourceKind::kPlain;
    std::string source = {};
    std::string target = {};
    std::string fstype = {};
    std::string data = {};
    unsigned long flags = 0;
    unsigned long remount_flags = 0;
    TargetCreate create = TargetCreate::kNone;
    bool optional = false;
  };

  // The view for spec: rootfs read-only, fresh /proc with masks, minimal
  // /dev, tmpfs /tmp, the spec's binds, tmpfs mounts and masks, pivot_root.
  // Checks the rootfs and every bind source (no symlink in any component) so
  // a bad path fails here with a clear SysError; the child opens them again
  // the same way.
  static MountPlan for_spec(const RunSpec& spec);

  const std::vector<Step>& steps() const { return steps_; }
  // Valid while this plan lives and is not modified.
  const std::vector<RawMountOp>& raw() const { return raw_; }
  const std::string& new_root() const { return new_root_; }

 private:
  void add(Step step);
  void finalize();
  std::vector<Step> steps_;
  std::vector<RawMountOp> raw_;
  std::string new_root_;
};

// Mount flags a bind of `path` must keep when remounted inside a user namespace
// (the kernel refuses to clear nosuid/nodev/noexec/atime flags it locked).
unsigned long locked_mount_flags(const std::string& path);

// Opens `path` with O_PATH without following a symlink in any component;
// throws SysError ("open mount source /x: Too many levels of symbolic links").
UniqueFd open_no_symlinks(const std::string& path, const std::string& what);

// Why this process cannot use openat2(), which every sandbox's mounts are
// resolved with, or "" when it can.
std::string openat2_problem();

// Replays the plan in the child. Returns 0 or errno; on failure *step and
// *object name what failed. Async-signal-safe.
int apply_mount_plan(const RawMountOp* ops, size_t count, const char** step, const char** object) noexcept;

}  // namespace nsbox
