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

// What waits on sock, looked at without taking it or waiting: a message,
// nothing yet, or end of file (the peer closed, and every message it sent
// has been taken). An error counts as closed.
enum class Pending { kNothing, kMessage, kClosed };
Pending pending_message(int sock) noexcept;

}  // namespace nsbox
