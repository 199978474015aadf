// The messages between nsbox and a fork server while it forks a run
// (docs/ARCHITECTURE.md, "Forked runs"): the request with its fds, and the
// one-byte steps the run's processes answer with, each carrying the
// sender's credentials and perhaps a descriptor.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "nsbox/unique_fd.h"

namespace nsbox {

// How long a fork server may take to answer each step of a fork.
inline constexpr int kForkStepTimeoutMs = 10000;

// Sends text and fds (SCM_RIGHTS, none when count is 0; at most
// kForkRequestFds) in one message. Waits for room in the socket up to the
// step timeout (a stuck fork server); `what` names the message in the error.
void send_with_fds(int sock, const std::string& text, const int* fds, size_t count, const char* what);

// Waits (up to the step timeout) for the one-byte message `tag` on sock, a
// socket with SO_PASSCRED, and returns the sender's pid in this process's
// pid namespace (the kernel translates the credentials). The first fd it
// carried goes to *fd when fd is given, which it must then carry; any other
// is closed. A child that failed is reported with its own words from
// error_fd (a ChildFailure); another tag, as from a rootfs of another
// version, is refused and what came with it closed. Throws SysError.
pid_t expect_from_fork(int sock, char tag, int error_fd, const char* what, UniqueFd* fd = nullptr);

}  // namespace nsbox
