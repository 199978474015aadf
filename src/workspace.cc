#include "nsbox/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string_view>

#include "cgroup_internal.h"
#include "nsbox/cgroup.h"
#include "nsbox/digest.h"
#include "nsbox/error.h"
#include "nsbox/io.h"
#include "nsbox/mounts.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

constexpr const char* kPrefix = "nsbox-";
constexpr int kMaxDepth = 16;
// Of out/, at most max_artifacts + this many entries are looked at.
constexpr uint64_t kEntriesBeyondArtifacts = 4096;
// At most this many refused entries are named, then one line counts the rest.
constexpr size_t kMaxRefusalsListed = 64;
constexpr uint64_t kWorkspaceSpareInodes = 16384;

// Where workspaces are made: TMPDIR resolved, as mountinfo names a mount
// point, so that the stale sweep finds a crashed run's mount whatever the
// spelling (a trailing slash, a symlink).
std::string temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp && *tmp == '/' ? tmp : "/tmp";
  return resolved_or_as_is(base);
}

// name in temp_base(), spelt as mountinfo spells it (no "//" for TMPDIR=/).
std::string in_temp_base(const std::string& name) {
  const std::string base = temp_base();
  return (base == "/" ? "" : base) + "/" + name;
}

// The directory name in parent_fd, opened without following a symlink.
// Not as root (a workspace of plain directories), a directory the run made
// unreadable or unwritable (chmod 0500) is made the owner's again first.
UniqueFd open_to_remove(int parent_fd, const std::string& name) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent_fd, name.c_str(), kFlags));
  if (::geteuid() == 0) return fd;
  if (!fd && errno == EACCES) {
    UniqueFd path(::openat(parent_fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    // The directory itself, through its descriptor: no name to swap.
    const std::string itself = "/proc/self/fd/" + std::to_string(path ? path.get() : -1);
    if (path && ::chmod(itself.c_str(), 0700) == 0) fd.reset(::open(itself.c_str(), kFlags & ~O_NOFOLLOW));
  }
  if (fd) ::fchmod(fd.get(), 0700);
  return fd;
}

// Deeper than this, a directory is moved up into the tree's top to be
// removed from there: removal holds at most this many descriptors and
// frames however deep a run nested its directories.
constexpr int kRemovalDepth = 32;
// A workspace holds at most ~16 400 inodes (nr_inodes), so 32-level passes
// reach any depth it can hold well within this.
constexpr int kMaxRemovalPasses = 1024;

// Names each entry of dir (not . or ..) with whether it is a directory.
std::vector<std::pair<std::string, bool>> entries_of(int dir_fd) {
  std::vector<std::pair<std::string, bool>> out;
  UniqueFd listed(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  DIR* dir = listed ? ::fdopendir(listed.get()) : nullptr;
  if (!dir) return out;
  (void)listed.release();  // the DIR owns it now
  ::rewinddir(dir);
  while (dirent* e = ::readdir(dir)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    struct stat st {};
    if (e->d_type == DT_UNKNOWN && ::fstatat(::dirfd(dir), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      is_dir = S_ISDIR(st.st_mode);
    out.emplace_back(std::move(n), is_dir);
  }
  ::closedir(dir);
  return out;
}

bool remove_below(int top_fd, int parent_fd, const std::string& name, int depth);

// Removes each entry of dir_fd, itself at depth below the tree's top top_fd
// (moving what is too deep up into it); true when anything went.
bool clear_entries(int top_fd, int dir_fd, int depth) {
  bool progress = false;
  for (const auto& [n, is_dir] : entries_of(dir_fd)) {
    if (is_dir)
      progress = remove_below(top_fd, dir_fd, n, depth + 1) || progress;
    else
      progress = ::unlinkat(dir_fd, n.c_str(), 0) == 0 || progress;
  }
  return progress;
}

// Empties and removes the directory name in parent_fd, at depth below the
// tree's top top_fd; true when anything was removed or moved.
bool remove_below(int top_fd, int parent_fd, const std::string& name, int depth) {
  if (depth >= kRemovalDepth) {
    static std::atomic<unsigned> moved{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string up = ".nsbox-removing-" + std::to_string(++moved);
      if (::renameat2(parent_fd, name.c_str(), top_fd, up.c_str(), RENAME_NOREPLACE) == 0) return true;
      if (errno != EEXIST) break;
    }
    return false;
  }
  UniqueFd fd = open_to_remove(parent_fd, name);
  const bool progress = fd && clear_entries(top_fd, fd.get(), depth);
  return ::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) == 0 || progress;
}

// Removes the directory name in parent_fd and everything in it, never
// following a symlink, whatever the depth or modes the run left.
void remove_tree_at(int parent_fd, const std::string& name) {
  UniqueFd top = open_to_remove(parent_fd, name);
  // What was too deep was moved up into top: go on while anything goes
  // (bounded: each pass takes kRemovalDepth levels off what is left).
  for (int pass = 0; top && pass < kMaxRemovalPasses && clear_entries(top.get(), top.get(), 0); ++pass) {
  }
  ::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR);
}

// The run's own directory inside a workspace's: what is mounted and bound.
constexpr const char* kWorkspaceInner = "ws";

// Removes the workspace whose outer directory is path, unmounting what is
// mounted on it first (a tmpfs on path/ws; on path itself as nsbox laid
// workspaces out before the outer directory existed).
void remove_workspace(const std::string& path, bool inner_mounted, bool outer_mounted = false) {
  if (inner_mounted) ::umount2((path + "/" + kWorkspaceInner).c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  if (outer_mounted) ::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  auto slash = path.rfind('/');
  UniqueFd parent(::open(path.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (parent) remove_tree_at(parent.get(), path.substr(slash + 1));
}

bool is_mount_point(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mount_point;
    f >> id >> parent >> dev >> root >> mount_point;
    if (unescape_mountinfo(mount_point) == path) return true;
  }
  return false;
}

// Copies src_fd to a new file `name` in dst_dir (never replacing anything,
// never through a symlink), hashing it; copies nothing when dst_dir < 0.
// Copies at most limit bytes: an artifact's size was checked against the
// caps before, and a file that grew since is cut there.
std::string copy_and_hash(int src_fd, int dst_dir, const std::string& name, uid_t uid, gid_t gid, bool chown_it,
                          std::string* content = nullptr, uint64_t limit = std::numeric_limits<uint64_t>::max()) {
  UniqueFd out;
  if (dst_dir >= 0) {
    out.reset(::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!out) throw SysError("create", name, errno);
    if (chown_it && ::fchown(out.get(), uid, gid) != 0) throw SysError("chown", name, errno);
  }
  Sha256 hash;
  char buf[65536];
  ssize_t n = 0;
  while (limit > 0 && (n = ::read(src_fd, buf, static_cast<size_t>(std::min<uint64_t>(sizeof(buf), limit)))) > 0) {
    limit -= static_cast<uint64_t>(n);
    hash.update(buf, static_cast<size_t>(n));
    if (content) content->append(buf, static_cast<size_t>(n));
    for (ssize_t done = 0; out && done < n;) {
      ssize_t w = ::write(out.get(), buf + done, static_cast<size_t>(n - done));
      if (w < 0) throw SysError("write", name, errno);
      done += w;
    }
  }
  if (n < 0) throw SysError("read", name, errno);
  return hash.hex();
}

// A directory of the artifacts copy, made only once an artifact is copied
// into it or below it: the run's empty directories never reach the host.
struct LazyDir {
  LazyDir* parent = nullptr;
  int fd = -1;       // the open directory, once made (or the root, given; -1: no copy)
  std::string name;  // in parent
  std::string rel;   // for errors
  UniqueFd owned;

  int get() {
    if (fd >= 0 || !parent) return fd;
    const int parent_fd = parent->get();
    if (parent_fd < 0) return -1;  // nothing is copied: artifacts are only hashed
    if (::mkdirat(parent_fd, name.c_str(), 0755) != 0 && errno != EEXIST) throw SysError("mkdir", rel, errno);
    owned.reset(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!owned) throw SysError("open", rel, errno);
    fd = owned.get();
    return fd;
  }
};

// Decodes one UTF-8 sequence of text at i (strict: no overlong forms,
// surrogates or code points past U+10FFFF); -1 when it is not one.
int32_t next_code_point(std::string_view text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
  if (length == 0 || i + length > text.size()) return -1;
  int32_t cp = length == 1 ? lead : lead & (0x7f >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  static constexpr int32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kLeast[length] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  i += length;
  return cp;
}

// Why an artifact's name cannot be returned as it is, or nullptr. Names
// become JSON strings: bytes that are not UTF-8 would each become U+FFFD,
// and two files would come back under one name.
const char* name_problem(std::string_view name) {
  for (size_t i = 0; i < name.size();) {
    const int32_t cp = next_code_point(name, i);
    if (cp < 0) return "a name that is not valid UTF-8";
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return "a name with control characters";
  }
  return nullptr;
}

// A refused name as the report shows it: controls as '?' and each byte
// that is not UTF-8 as \xNN, so that two refused names never read alike.
std::string shown_name(std::string_view name) {
  std::string out;
  char hex[8];
  for (size_t i = 0; i < name.size();) {
    const size_t at = i;
    const int32_t cp = next_code_point(name, i);
    if (cp < 0) {
      std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned char>(name[at]));
      out += hex;
      i = at + 1;
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
      out += '?';
    } else {
      out.append(name.substr(at, i - at));
    }
  }
  return out;
}

struct Collector {
  const WorkspaceSpec& spec;
  ArtifactReport report;
  uint64_t total = 0;
  uint64_t examined = 0;           // entries of out/ looked at, of any kind
  uint64_t refusals_unlisted = 0;  // past kMaxRefusalsListed
  bool out_of_entries = false;

  // What the run left is bounded by the workspace's size and inode cap;
  // what is looked at and said of it is bounded here too, so that a tree
  // of empty files or directories costs the host no more than this.
  uint64_t entry_budget() const { return spec.max_artifacts + kEntriesBeyondArtifacts; }

  void refuse(std::string why) {
    if (report.refused.size() < kMaxRefusalsListed)
      report.refused.push_back(std::move(why));
    else
      ++refusals_unlisted;
  }

  void walk(int dir_fd, LazyDir& dst, const std::string& prefix, int depth) {
    DIR* dir = ::fdopendir(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
    if (!dir) return;
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (examined + names.size() >= entry_budget()) {
        out_of_entries = true;
        break;
      }
      names.push_back(std::move(n));
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    examined += names.size();
    for (const auto& n : names) visit(dir_fd, dst, n, prefix + n, depth);
  }

  void visit(int dir_fd, LazyDir& dst, const std::string& n, const std::string& rel, int depth) {
    if (const char* problem = name_problem(n)) {
      refuse(shown_name(rel) + ": " + problem + ", not returned");
      return;
    }
    // O_NOFOLLOW|O_NONBLOCK: a symlink or a FIFO planted by the run is
    // reported, never followed or waited on.
    UniqueFd fd(::openat(dir_fd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      refuse(rel + ": " + (errno == ELOOP ? "a symlink, not returned" : std::strerror(errno)));
      return;
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxDepth) {
        refuse(rel + ": nested too deep, not returned");
        return;
      }
      LazyDir sub{&dst, -1, n, rel, {}};
      walk(fd.get(), sub, rel + "/", depth + 1);
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      refuse(rel + ": not a regular file, not returned");
      return;
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (report.artifacts.size() >= spec.max_artifacts) {
      refuse(rel + ": over the cap of " + std::to_string(spec.max_artifacts) + " artifacts");
      return;
    }
    if (total + size > spec.max_artifact_bytes) {
      refuse(rel + " (" + std::to_string(size) + " bytes): over the cap of " + std::to_string(spec.max_artifact_bytes) +
             " bytes of artifacts");
      return;
    }
    total += size;
    Artifact artifact{rel, size, {}, {}};
    if (spec.keep_content) artifact.content.reserve(size);
    artifact.sha256 =
        copy_and_hash(fd.get(), dst.get(), n, 0, 0, false, spec.keep_content ? &artifact.content : nullptr, size);
    report.artifacts.push_back(std::move(artifact));
  }

  // The bounds said last, each in one line.
  void finish() {
    if (refusals_unlisted > 0)
      report.refused.push_back("and " + std::to_string(refusals_unlisted) + " more not returned, not listed");
    if (out_of_entries)
      report.refused.push_back("out/ holds more than " + std::to_string(entry_budget()) +
                               " entries: the rest were not looked at");
  }
};

// Makes $TMPDIR/nsbox-run-<pid>-<start>-<n>-<random>, 0700, and returns its
// path. The random part is why: another host user can make any name in a
// shared /tmp first, and one it could foresee would fail every run.
std::string make_outer_directory() {
  const std::string run_name = next_run_cgroup_name();
  for (int attempt = 0;; ++attempt) {
    unsigned char bytes[8];
    if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) throw SysError("getrandom", "workspace name", errno);
    const std::string path = in_temp_base(kPrefix + run_name + "-" + to_hex(bytes, sizeof bytes));
    if (::mkdir(path.c_str(), 0700) == 0) return path;
    if (errno != EEXIST || attempt == 7) throw SysError("mkdir workspace", path, errno);
  }
}

// Whether uid/gid (no supplementary groups: the sandbox's host user has
// none) may pass through dir by its mode bits. A directory with an ACL is
// taken as passable: the kernel decides there, and a refusal here would
// be a guess.
bool passable_by(const std::string& dir, uid_t uid, gid_t gid) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return true;  // the mkdir below names what is wrong
  if (::getxattr(dir.c_str(), "system.posix_acl_access", nullptr, 0) > 0) return true;
  const mode_t bit = st.st_uid == uid ? S_IXUSR : st.st_gid == gid ? S_IXGRP : S_IXOTH;
  return (st.st_mode & bit) != 0;
}

// PID 1 binds the workspace by its path as the sandbox's host user, so
// that user must be able to pass through $TMPDIR and every directory above
// it (a private TMPDIR of mode 0700, as pam_tmpdir gives root, is not):
// refused here, naming the directory, rather than in the sandbox as a
// failed mount of /workspace.
void check_reachable_by_sandbox_user(uid_t uid, gid_t gid) {
  std::string dir = temp_base();
  for (;;) {
    if (!passable_by(dir, uid, gid)) {
      struct stat st {};
      (void)::stat(dir.c_str(), &st);
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw SysError("workspace",
                     dir + " (mode " + mode + ", owner uid " + std::to_string(st.st_uid) +
                         ") does not let the sandbox's host user (uid " + std::to_string(uid) +
                         ") pass through to the run's workspace below $TMPDIR (" + temp_base() +
                         "): give others search permission (chmod o+x) or point TMPDIR elsewhere",
                     EACCES);
    }
    if (dir == "/") return;
    const size_t slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
}

}  // namespace

uint64_t workspace_inodes(const WorkspaceSpec& spec) {
  return kWorkspaceSpareInodes + spec.max_artifacts + spec.inputs.size();
}

void check_input_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    throw UsageError("input name '" + name + "' must be a plain file name (no '/', not . or ..)");
}

Workspace::Workspace(const WorkspaceSpec& spec, uid_t host_uid, gid_t host_gid) : spec_(spec) {
  // The run owns its directory and may open it to anyone (chmod 0777):
  // the outer one, 0700, keeps every other host user out. It is the
  // sandbox's host user's too, so that PID 1 can bind ws/ by its path, but
  // lies outside every sandbox's view: no run can change it.
  if (::geteuid() == 0 && host_uid != 0) check_reachable_by_sandbox_user(host_uid, host_gid);
  outer_ = make_outer_directory();
  path_ = outer_ + "/" + kWorkspaceInner;
  try {
    if (::geteuid() == 0) {
      UniqueFd outer(::open(outer_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!outer || ::fchown(outer.get(), host_uid, host_gid) != 0) throw SysError("chown workspace", outer_, errno);
    }
    if (::mkdir(path_.c_str(), 0700) != 0) throw SysError("mkdir workspace", path_, errno);
    if (::geteuid() == 0) {
      // A tmpfs caps what the run can write to the host's disk.
      const std::string data = "size=" + std::to_string(spec.size_bytes) +
                               ",nr_inodes=" + std::to_string(workspace_inodes(spec)) +
                               ",mode=0700,uid=" + std::to_string(host_uid) + ",gid=" + std::to_string(host_gid);
      if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0)
        throw SysError("mount workspace tmpfs", path_, errno);
      mounted_ = true;
    }
    dir_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir_) throw SysError("open workspace", path_, errno);
    const UniqueFd& dir = dir_;
    const bool as_root = ::geteuid() == 0;
    if (as_root && ::fchown(dir.get(), host_uid, host_gid) != 0) throw SysError("chown workspace", path_, errno);
    if (::mkdirat(dir.get(), "out", 0755) != 0) throw SysError("mkdir", path_ + "/out", errno);
    if (as_root && ::fchownat(dir.get(), "out", host_uid, host_gid, AT_SYMLINK_NOFOLLOW) != 0)
      throw SysError("chown", path_ + "/out", errno);
    for (const auto& [host_file, name] : spec.inputs) {
      check_input_name(name);
      UniqueFd src(::open(host_file.c_str(), O_RDONLY | O_CLOEXEC));
      if (!src) throw SysError("open input", host_file, errno);
      struct stat st {};
      if (::fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode))
        throw SysError("input", host_file + " (not a regular file)", EINVAL);
      copy_and_hash(src.get(), dir.get(), name, host_uid, host_gid, as_root);
    }
  } catch (...) {
    remove_workspace(outer_, mounted_);
    throw;
  }
}

Workspace::~Workspace() { remove_workspace(outer_, mounted_); }

ArtifactReport Workspace::collect() const { return collect_artifacts(spec_, dir_.get()); }

ArtifactReport collect_artifacts(const WorkspaceSpec& spec, int workspace_dir) {
  Collector c{spec, {}};
  UniqueFd out(::openat(workspace_dir, "out", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!out) {
    c.report.refused.push_back(std::string("out: ") + (errno == ELOOP || errno == ENOTDIR
                                                           ? "replaced by something that is not a directory"
                                                           : std::strerror(errno)));
    return c.report;
  }
  UniqueFd dst;
  if (!spec.artifacts_dir.empty()) {
    ::mkdir(spec.artifacts_dir.c_str(), 0755);
    dst.reset(::open(spec.artifacts_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dst) throw SysError("open artifacts directory", spec.artifacts_dir, errno);
  }
  LazyDir root{nullptr, dst ? dst.get() : -1, "", "", {}};
  c.walk(out.get(), root, "", 0);
  c.finish();
  return c.report;
}

int remove_stale_workspaces(uid_t sandbox_uid) {
  const std::string base = temp_base();
  int removed = 0;
  DIR* dir = ::opendir(base.c_str());
  if (!dir) return 0;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind(std::string(kPrefix) + "run-", 0) != 0) continue;
    // Only what nsbox made: another user may name a directory so in a
    // shared /tmp, and root must not spend its time removing that.
    struct stat st {};
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        (st.st_mode & 07777) != 0700 || (st.st_uid != ::geteuid() && st.st_uid != sandbox_uid))
      continue;
    if (!cgroup_internal::run_owner_alive(name.substr(std::string(kPrefix).size()))) stale.push_back(name);
  }
  ::closedir(dir);
  for (const auto& name : stale) {
    const std::string path = in_temp_base(name);
    remove_workspace(path, is_mount_point(path + "/" + kWorkspaceInner), is_mount_point(path));
    ++removed;
  }
  return removed;
}

}  // namespace nsbox
