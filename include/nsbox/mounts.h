// The mount plan: every mount of the sandbox's filesystem view, computed by the
// supervisor before clone and replayed by the child with raw mount(2) calls.
#pragma once

#include <string>
#include <vector>

#include "nsbox/run_spec.h"

namespace nsbox {

enum class MountKind {
  kMakePrivate,   // mount --make-rprivate target
  kBind,          // bind source on target (not recursive), then remount_flags if set
  kFilesystem,    // mount fstype on target with flags and data (proc, tmpfs, devpts)
  kRemount,       // change flags of the mount at target
  kMkdir,         // mkdir target (EEXIST is fine)
  kTouch,         // create an empty file at target to bind a file on
  kSymlink,       // symlink source -> target
  kPivotRoot,     // make target the root and detach the old one
};

// Raw view handed to the child: pointers into a MountPlan that outlives clone.
struct RawMountOp {
  MountKind kind;
  const char* source;
  const char* target;
  const char* fstype;
  const char* data;
  unsigned long flags;
  unsigned long remount_flags;  // 0: no remount after a bind
  bool optional;                // a missing target or source is skipped, not fatal
};

class MountPlan {
 public:
  struct Step {
    MountKind kind;
    std::string source = {};
    std::string target = {};  // host path, already below the new root
    std::string fstype = {};
    std::string data = {};
    unsigned long flags = 0;
    unsigned long remount_flags = 0;
    bool optional = false;
  };

  // The default view: rootfs read-only, fresh /proc with masks, minimal /dev,
  // tmpfs /tmp capped at limits.tmpfs_bytes, then pivot_root into it.
  static MountPlan for_spec(const RunSpec& spec);

  const std::vector<Step>& steps() const { return steps_; }
  // Valid while this plan lives and is not modified.
  const std::vector<RawMountOp>& raw() const { return raw_; }

 private:
  void add(Step step);
  void finalize();
  std::vector<Step> steps_;
  std::vector<RawMountOp> raw_;
};

// Mount flags a bind of `path` must keep when remounted inside a user namespace
// (the kernel refuses to clear nosuid/nodev/noexec/atime flags it locked).
unsigned long locked_mount_flags(const std::string& path);

// Replays one step in the child. Returns 0 or errno; on failure *step_name
// names the syscall that failed. Async-signal-safe.
int apply_mount_op(const RawMountOp& op, const char** step_name) noexcept;

}  // namespace nsbox
