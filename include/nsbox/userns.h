// User namespace: which host ids the sandbox user maps to, and writing the maps.
#pragma once

#include <sys/types.h>

#include <string>

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

}  // namespace nsbox
