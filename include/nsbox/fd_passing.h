// Passing one file descriptor over a unix socket (SCM_RIGHTS) with a one-byte
// tag. Raw syscalls only, no allocation: the sandbox child uses it after
// clone (the seccomp listener), the node's spawner for its jobs.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace nsbox {

// Sends fd with tag; returns 0 or errno.
int send_fd(int sock, int fd, char tag) noexcept;

// Receives one message: the fd (close-on-exec) and its tag. Returns -1 at
// EOF (errno 0) or on error (errno set), -2 when the message carried no fd.
int receive_fd(int sock, char* tag) noexcept;

// Offering an fd by its number rather than sending it. The kernel counts the
// descriptors in flight over unix sockets per host user and refuses
// SCM_RIGHTS once that user's count passes the sender's RLIMIT_NOFILE: a run
// holding a few hundred in flight, unreceived, would keep every sandbox of
// the same host uid from handing over its seccomp listener. The receiver
// takes the fd out of the offering process with pidfd_getfd instead (root's
// CAP_SYS_PTRACE), and answers kFdTaken; where it cannot (no pidfd_getfd,
// Yama's ptrace_scope 3, nsbox without root), it answers kFdSendIt and the
// fd is sent as before.
inline constexpr char kFdTaken = 'T';
inline constexpr char kFdSendIt = 'S';

// The offering side: one message {tag, fd number}, then waits for the
// answer, and sends fd (SCM_RIGHTS) when asked to. Returns 0 or errno (EPIPE:
// the receiver went away). Async-signal-safe: for the cloned workload.
int offer_fd(int sock, int fd, char tag) noexcept;

// The receiving side, on a SOCK_SEQPACKET socket with SO_PASSCRED: takes the
// next message, an offer (the fd is taken from its sender, whose pid the
// kernel's credentials give) or a plain send_fd. Returns the fd
// (close-on-exec) and its tag, or -1 with errno (0 at end of file).
int take_offered_fd(int sock, char* tag) noexcept;

// One message of at most len bytes on a socket with SO_PASSCRED: its size
// (0 at end of file, -1 with errno), the sender's pid (0 without
// credentials) and the first fd it carried (-1: none; any other is closed).
ssize_t receive_with_credentials(int sock, void* buf, size_t len, pid_t* pid, int* fd) noexcept;

// The fd numbered fd in process pid (pidfd_open + pidfd_getfd), close-on-exec,
// or -1 with errno.
int take_fd_from(pid_t pid, int fd) noexcept;

// One byte of answer to an offer (kFdTaken or kFdSendIt); 0 or errno.
int answer_offer(int sock, char answer) noexcept;

// An offer on the wire: the tag, then the fd's number in the sender.
struct [[gnu::packed]] FdOffer {
  char tag;
  int32_t fd;
};

// What waits on sock, looked at without taking it or waiting: a message,
// nothing yet, or end of file (the peer closed, and every message it sent
// has been taken). An error counts as closed.
enum class Pending { kNothing, kMessage, kClosed };
Pending pending_message(int sock) noexcept;

}  // namespace nsbox
