// The fork server ("zygote", profile key `fork_server`): one sandbox per
// (profile, language) whose workload, zygote.py or zygote.js, has the
// runner loaded and forks each run into fresh user, mount, pid, net, ipc,
// uts and cgroup namespaces and a fresh cgroup before any of the run's code
// exists. Runs then skip the interpreter's start-up. The trade-offs are in
// docs/SECURITY.md ("Fork server"); the protocol is in zygote.py.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nsbox/rlimits.h"
#include "nsbox/run_spec.h"
#include "nsbox/seccomp.h"

namespace nsbox {

// Where the fork servers live in the rootfs.
inline constexpr const char* kForkServerScript = "/opt/nsbox/zygote.py";
inline constexpr const char* kNodeForkServerScript = "/opt/nsbox/zygote.js";

// The fd on which a zygote receives its fork requests (CONTROL_FD in
// zygote.py and zygote.js).
inline constexpr int kForkServerRequestFd = 3;

// How long a fork server may take from its sandbox's start to serving (its
// interpreter's start-up and preloads; seconds under software emulation).
// One that takes longer is torn down, and started again after a back-off.
inline constexpr std::chrono::seconds kForkServerStartTimeout{60};

// What the keeper holds of a fork server's stdout and stderr between two
// reads (fork_server_spec); more than a pipe's 64 KiB.
inline constexpr uint64_t kForkServerOutputBytes = 1 << 20;

// The number of fds a fork request carries: the run socket, stdin, stdout,
// stderr, the result pipe, the error pipe and the report pipe.
inline constexpr int kForkRequestFds = 7;

// The largest fork request (b"F" and its JSON) the fork servers read
// (MAX_REQUEST in zygote.py and rootfs/forknode.c).
inline constexpr size_t kMaxForkRequestBytes = 1 << 20;
// What a fork request's socket buffer holds beside the request: its fds
// and headers.
inline constexpr size_t kForkRequestHeadroom = 64 * 1024;

// Raises the send buffer of sock (a Unix SEQPACKET socket to a fork
// server) to hold the largest fork request and its fds: past
// net.core.wmem_max only with CAP_NET_ADMIN (SO_SNDBUFFORCE), else as far
// as wmem_max lets SO_SNDBUF.
void make_room_for_a_fork_request(int sock);

// The largest fork request a socket made so carries here: kMaxForkRequestBytes,
// or less where nsbox lacks CAP_NET_ADMIN and net.core.wmem_max is small
// (the default 212992 gives about 350 KiB). 0 when no socket can be made.
size_t fork_request_capacity();

// Why spec's runs cannot come from a fork server, or "" when they can.
std::string fork_server_refusal(const RunSpec& spec);

// The spec of the fork server's own sandbox for runs of run_spec (a Python
// or JavaScript exec spec): zygote.py or zygote.js as the workload with control_fd at fd 3, the fork
// server's seccomp filter, /proc unmasked (each run masks its own), no
// workspace (each run gets its own), no stdin, no deadline or CPU-time limit
// of its own (its runs have theirs), its output held up to
// kForkServerOutputBytes between reads; the rest as a run's.
RunSpec fork_server_spec(const RunSpec& run_spec, int control_fd);

// The settings the zygote applies to one run (JSON after the 'F').
std::string fork_request(const RunSpec& spec, const std::vector<RlimitSetting>& rlimits, const SeccompProgram& program);

// The size of the largest fork request (with its 'F') a run of spec (an
// exec spec) makes on any host: with spec's seccomp program compiled and
// the rlimits that stand in for the memory and pids controllers where a
// host lacks them. Checked against
// kMaxForkRequestBytes when a node loads its tenants, so that a profile
// whose forked runs would all fail is refused then.
size_t largest_fork_request_bytes(const RunSpec& spec);

// The rlimits a forked run's PID 1 sets (forkinit.c): a run's, with the
// stand-ins for the controllers in `missing`, and the charged ones. Not
// RLIMIT_CORE: a run inherits the fork server's, which the fork server's
// filter keeps anything in it from changing.
std::vector<RlimitSetting> forked_run_rlimits(const Limits& limits, const std::set<std::string>& missing);

}  // namespace nsbox
