// Passing one file descriptor over a unix socket (SCM_RIGHTS) with a one-byte
// tag. Raw syscalls only, no allocation: the sandbox child uses it after
// clone (the seccomp listener), the node's spawner for its jobs.
#pragma once

namespace nsbox {

// Sends fd with tag; returns 0 or errno.
int send_fd(int sock, int fd, char tag) noexcept;

// Receives one message: the fd (close-on-exec) and its tag. Returns -1 at
// EOF (errno 0) or on error (errno set), -2 when the message carried no fd.
int receive_fd(int sock, char* tag) noexcept;

}  // namespace nsbox
