// Passing fds over the node's SOCK_SEQPACKET control sockets: what a
// receiver sees when its peer closes, on the real kernel.
#include "nsbox/fd_passing.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

struct SocketPair {
  UniqueFd ours, theirs;
};

SocketPair seqpacket_pair() {
  int sv[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0) << errno;
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

struct Pipe {
  UniqueFd read, write;
};

Pipe make_pipe() {
  int p[2] = {-1, -1};
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0) << errno;
  return {UniqueFd(p[0]), UniqueFd(p[1])};
}

// The pool's race: a warm sandbox's worker says it is ready just as the
// pool, which has not read that yet, gives it a job and closes its end.
// The kernel then fails the worker's next receive once (ECONNRESET),
// ahead of the job that is still queued.
SocketPair job_sent_by_a_peer_that_closed_with_ours_unread(const Pipe& job) {
  SocketPair p = seqpacket_pair();
  EXPECT_EQ(::send(p.ours.get(), "R", 1, MSG_NOSIGNAL), 1);
  EXPECT_EQ(send_fd(p.theirs.get(), job.write.get(), 'J'), 0);
  p.theirs.reset();
  return p;
}

// The fd received is the one sent: what is written through it arrives.
void expect_same_pipe(int received, const Pipe& job) {
  ASSERT_EQ(::write(received, "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(job.read.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(FdPassing, AJobFromAPeerThatClosedWithOurMessageUnreadIsReceived) {
  const Pipe job = make_pipe();
  SocketPair p = job_sent_by_a_peer_that_closed_with_ours_unread(job);
  char tag = 0;
  const UniqueFd got(receive_fd(p.ours.get(), &tag));
  ASSERT_TRUE(got) << "taken for the end of the socket: " << std::strerror(errno);
  EXPECT_EQ(tag, 'J');
  expect_same_pipe(got.get(), job);
  errno = EINVAL;
  EXPECT_EQ(receive_fd(p.ours.get(), &tag), -1);
  EXPECT_EQ(errno, 0) << "end of file after the job";
}

TEST(FdPassing, AJobFromAPeerThatClosedWithOurMessageUnreadIsSeenPending) {
  const Pipe job = make_pipe();
  SocketPair p = job_sent_by_a_peer_that_closed_with_ours_unread(job);
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kMessage);
  char tag = 0;
  const UniqueFd got(receive_fd(p.ours.get(), &tag));
  ASSERT_TRUE(got);
  EXPECT_EQ(tag, 'J');
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kClosed);
}

TEST(FdPassing, PendingSaysNothingYetWithoutTakingOrWaiting) {
  SocketPair p = seqpacket_pair();
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kNothing);
  const Pipe job = make_pipe();
  ASSERT_EQ(send_fd(p.theirs.get(), job.write.get(), 'J'), 0);
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kMessage);
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kMessage) << "a look must not take the message";
  p.theirs.reset();
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kMessage) << "sent before the close: still there";
}

TEST(FdPassing, APeerThatClosedHavingSentNothingIsClosed) {
  SocketPair p = seqpacket_pair();
  ASSERT_EQ(::send(p.ours.get(), "R", 1, MSG_NOSIGNAL), 1);  // unread: the peer's close resets us
  p.theirs.reset();
  EXPECT_EQ(pending_message(p.ours.get()), Pending::kClosed);
  char tag = 0;
  errno = EINVAL;
  EXPECT_EQ(receive_fd(p.ours.get(), &tag), -1);
  EXPECT_EQ(errno, 0);
}

}  // namespace
}  // namespace nsbox
