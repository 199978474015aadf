// User namespace: which host ids the sandbox user maps to, and writing the maps.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nsbox {

// The host uid/gid that the sandbox user (65534 inside) is backed by.
struct HostIds {
  uid_t uid;
  gid_t gid;
  std::string source;  // how it was chosen, for `nsbox doctor`
};

// Fallback host id when nsbox runs as root and /etc/subuid has no "nsbox"
// entry: a high id no distribution allocates, never 0.
constexpr uid_t kDefaultHostId = 1879048192;  // 0x70000000

// As root: the first id of the "nsbox" entries in /etc/subuid and /etc/subgid,
// else kDefaultHostId. As any other user: that user's own uid and gid (the only
// mapping the kernel allows without privilege). Never returns host id 0.
HostIds choose_host_ids();

// Parses the first range of `user` in a subid file ("name:start:count"),
// returning false when there is none. Exposed for tests.
bool find_subid_start(const std::string& file_contents, const std::string& user, unsigned long* start);

// The single-line map "inside host 1\n".
std::string id_map_line(unsigned long inside, unsigned long host);

// Writes setgroups=deny, uid_map and gid_map of `pid`; throws SysError.
void write_id_maps(pid_t pid, uid_t inside_uid, gid_t inside_gid, const HostIds& host);

// One per-user kernel quota of a user namespace: the file under
// /proc/sys/user and its value. The kernel charges what a sandbox's
// processes hold of such a quota to the user that made its user namespace
// (host root, for nsbox as root), up the chain of namespaces, and checks it
// at every level against that level's own value: set in the sandbox's
// namespace, it bounds what one run can take of its maker's.
struct UserNsQuota {
  const char* name;  // a static string: "max_inotify_instances", ...
  uint64_t value;
};

// The quotas every run's user namespace gets: inotify instances and watches
// as its limits say, no fanotify group or mark, no nested user namespace.
std::vector<UserNsQuota> user_ns_quotas(uint64_t inotify_instances, uint64_t inotify_watches);

// Writes each quota in the calling process's own user namespace (the
// /proc/sys/user files of whichever proc is mounted at /proc act on the
// caller's namespace); needs CAP_SYS_RESOURCE in it. A file the kernel does
// not have is skipped: its feature is not built in (fanotify before 5.13),
// so there is nothing to bound. Returns 0, or an errno with *failed set to
// the file. Async-signal-safe: for the cloned child.
int write_user_ns_quotas(const UserNsQuota* quotas, size_t count, const char** failed) noexcept;

}  // namespace nsbox
