// The per-run workspace: a host directory nsbox creates for one run, mounted
// read-write in the sandbox, filled with the caller's input files, from whose
// out/ directory the run's artifacts come back, and removed afterwards.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nsbox/unique_fd.h"

namespace nsbox {

struct WorkspaceSpec {
  std::string inside_path = "/workspace";
  uint64_t size_bytes = 64ull << 20;  // tmpfs cap of the whole workspace
  uint64_t max_artifacts = 64;
  uint64_t max_artifact_bytes = 16ull << 20;
  std::vector<std::pair<std::string, std::string>> inputs;  // host file, name inside
  std::string artifacts_dir;                                // copy artifacts here when set
  bool keep_content = false;                                // return each artifact's bytes in Artifact::content
};

struct Artifact {
  std::string name;  // relative to out/, e.g. "plot.png" or "sub/data.csv"
  uint64_t size = 0;
  std::string sha256;
  std::string content;  // the bytes, only when WorkspaceSpec::keep_content
};

struct ArtifactReport {
  std::vector<Artifact> artifacts;
  std::vector<std::string> refused;  // "name: why", never silently dropped
};

class Workspace {
 public:
  // Creates $TMPDIR/nsbox-run-<pid>-<start>-<n>-<random> (nsbox's, 0700)
  // and in it ws/ (a size- and inode-capped tmpfs when nsbox runs as root,
  // else a plain directory) owned by the sandbox's host ids, with out/, and
  // copies the inputs in. Throws SysError/UsageError.
  Workspace(const WorkspaceSpec& spec, uid_t host_uid, gid_t host_gid);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const std::string& host_path() const { return path_; }  // ws/: what the sandbox sees
  bool size_capped() const { return mounted_; }
  // Regular files under out/ within the caps (never following a symlink),
  // copied to spec.artifacts_dir when set, kept in memory when
  // spec.keep_content.
  ArtifactReport collect() const;

 private:
  WorkspaceSpec spec_;
  std::string outer_;  // nsbox's own directory, which holds path_
  std::string path_;
  // ws/ itself, opened when made: the artifacts are read through it, so
  // that what happens to the path meanwhile (a sweep, an operator's rm)
  // cannot show the run's out/ as empty or another directory as it.
  UniqueFd dir_;
  bool mounted_ = false;
};

// The regular files under out/ of the workspace whose root directory is
// workspace_dir (opened by the caller), within spec's caps, never following a
// symlink; copied to spec.artifacts_dir when set, kept in memory when
// spec.keep_content.
ArtifactReport collect_artifacts(const WorkspaceSpec& spec, int workspace_dir);

// The files and directories a workspace's tmpfs may hold (its nr_inodes):
// the artifacts and inputs, and 16384 more for the run's own use. A size
// cap alone leaves inodes free: millions of empty files or directories for
// the artifact walk to go through.
uint64_t workspace_inodes(const WorkspaceSpec& spec);

// Validates an input name: a plain file name, no '/', not "." or "..".
void check_input_name(const std::string& name);

// Removes the workspaces of nsbox processes that died (unmounting them
// first): directories named as nsbox names them, 0700, owned by this
// process's user or by sandbox_uid (the sandboxes' host user), so that no
// other user's directory of that name is ever walked.
int remove_stale_workspaces(uid_t sandbox_uid);

}  // namespace nsbox
