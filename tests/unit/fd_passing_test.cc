// Passing fds over the node's SOCK_SEQPACKET control sockets: what a
// receiver sees when its peer closes, on the real kernel. And the steps a
// forked run's processes answer nsbox with (fork_messages.h): what is kept,
// what is closed, what is refused.
#include "nsbox/fd_passing.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "nsbox/child_report.h"
#include "nsbox/error.h"
#include "nsbox/fork_messages.h"
#include "nsbox/io.h"
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

// Offers (offer_fd): the receiver takes the fd out of the offering process
// (pidfd_getfd), so nothing is in flight on the socket; where it cannot, it
// asks for the fd and it is sent.
SocketPair passcred_pair() {
  SocketPair p = seqpacket_pair();
  const int on = 1;
  EXPECT_EQ(::setsockopt(p.ours.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on), 0) << errno;
  return p;
}

TEST(FdOffers, AnOfferIsTakenFromTheOfferingProcessAndAnswered) {
  SocketPair p = passcred_pair();
  Pipe job = make_pipe();
  int offered = -1;
  std::thread offerer([&] { offered = offer_fd(p.theirs.get(), job.write.get(), 'L'); });
  char tag = 0;
  UniqueFd taken(take_offered_fd(p.ours.get(), &tag));
  offerer.join();
  EXPECT_EQ(offered, 0);
  EXPECT_EQ(tag, 'L');
  ASSERT_TRUE(taken.valid()) << std::strerror(errno);
  EXPECT_NE(taken.get(), job.write.get()) << "a new descriptor of the same pipe";
  EXPECT_EQ(::fcntl(taken.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  expect_same_pipe(taken.get(), job);
}

TEST(FdOffers, AnOfferAnsweredSendItIsSentAsBefore) {
  SocketPair p = seqpacket_pair();
  Pipe job = make_pipe();
  int offered = -1;
  std::thread offerer([&] { offered = offer_fd(p.theirs.get(), job.write.get(), 'L'); });
  FdOffer offer{};
  ASSERT_EQ(::recv(p.ours.get(), &offer, sizeof offer, 0), static_cast<ssize_t>(sizeof offer));
  EXPECT_EQ(offer.tag, 'L');
  EXPECT_EQ(offer.fd, job.write.get());
  ASSERT_EQ(answer_offer(p.ours.get(), kFdSendIt), 0);
  char tag = 0;
  UniqueFd sent(receive_fd(p.ours.get(), &tag));
  offerer.join();
  EXPECT_EQ(offered, 0);
  ASSERT_TRUE(sent.valid());
  expect_same_pipe(sent.get(), job);
}

TEST(FdOffers, AnOfferThatCannotBeTakenIsAskedForAndReceived) {
  SocketPair p = passcred_pair();
  Pipe job = make_pipe();
  // An fd number the offering process does not have: pidfd_getfd fails.
  std::thread offerer([&] {
    const FdOffer offer{'L', 1 << 20};
    ASSERT_EQ(::send(p.theirs.get(), &offer, sizeof offer, 0), static_cast<ssize_t>(sizeof offer));
    char answer = 0;
    ASSERT_EQ(::recv(p.theirs.get(), &answer, 1, 0), 1);
    EXPECT_EQ(answer, kFdSendIt);
    EXPECT_EQ(send_fd(p.theirs.get(), job.write.get(), 'L'), 0);
  });
  char tag = 0;
  UniqueFd taken(take_offered_fd(p.ours.get(), &tag));
  offerer.join();
  ASSERT_TRUE(taken.valid()) << std::strerror(errno);
  expect_same_pipe(taken.get(), job);
}

TEST(FdOffers, AForkStepMayOfferItsFd) {
  SocketPair p = passcred_pair();
  Pipe errors = make_pipe(), job = make_pipe();
  int offered = -1;
  std::thread offerer([&] { offered = offer_fd(p.theirs.get(), job.write.get(), 'L'); });
  UniqueFd got;
  EXPECT_EQ(expect_from_fork(p.ours.get(), 'L', errors.read.get(), "seccomp listener", &got), ::getpid());
  offerer.join();
  EXPECT_EQ(offered, 0);
  ASSERT_TRUE(got.valid());
  expect_same_pipe(got.get(), job);
}

// Whether every write end of the pipe is closed: its read end is at EOF.
bool at_eof(int read_fd) {
  char byte;
  return readable_now(read_fd) && ::read(read_fd, &byte, 1) == 0;
}

// A run socket (SO_PASSCRED on ours, as nsbox's) on which the peer sent
// tag with the write end of `carried`, whose other copy is closed.
struct StepSent {
  SocketPair ch;
  Pipe errors, carried;
};

StepSent step_sent(char tag) {
  StepSent s{seqpacket_pair(), make_pipe(), make_pipe()};
  const int on = 1;
  EXPECT_EQ(::setsockopt(s.ch.ours.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on), 0) << errno;
  EXPECT_EQ(send_fd(s.ch.theirs.get(), s.carried.write.get(), tag), 0);
  s.carried.write.reset();
  return s;
}

TEST(ForkMessages, TheDueStepGivesItsSendersPidAndKeepsItsFd) {
  StepSent s = step_sent('U');
  Pipe& carried = s.carried;
  UniqueFd got;
  EXPECT_EQ(expect_from_fork(s.ch.ours.get(), 'U', s.errors.read.get(), "run init", &got), ::getpid());
  ASSERT_TRUE(got.valid());
  EXPECT_EQ(::fcntl(got.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC) << "received close-on-exec";
  EXPECT_FALSE(at_eof(carried.read.get())) << "the fd was kept";
  EXPECT_EQ(::write(got.get(), "x", 1), 1);
  got.reset();
  char byte = 0;
  EXPECT_EQ(::read(carried.read.get(), &byte, 1), 1);
  EXPECT_EQ(byte, 'x');
}

// Only the first fd of a step is kept, and only where one is asked for:
// the rest are closed, not leaked into nsbox.
TEST(ForkMessages, OnlyTheFirstFdOfAStepIsKeptAndOnlyWhereAskedFor) {
  SocketPair ch = seqpacket_pair();
  const int on = 1;
  ASSERT_EQ(::setsockopt(ch.ours.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on), 0) << errno;
  Pipe errors = make_pipe();
  Pipe first = make_pipe(), second = make_pipe(), unasked = make_pipe();
  const int two[] = {first.write.get(), second.write.get()};
  send_with_fds(ch.theirs.get(), "U", two, 2, "step");
  const int one[] = {unasked.write.get()};
  send_with_fds(ch.theirs.get(), "L", one, 1, "step");
  first.write.reset();
  second.write.reset();
  unasked.write.reset();
  UniqueFd got;
  EXPECT_EQ(expect_from_fork(ch.ours.get(), 'U', errors.read.get(), "run init", &got), ::getpid());
  EXPECT_FALSE(at_eof(first.read.get())) << "the first fd was not kept";
  EXPECT_TRUE(at_eof(second.read.get())) << "the second fd was leaked";
  EXPECT_EQ(expect_from_fork(ch.ours.get(), 'L', errors.read.get(), "listener"), ::getpid());
  EXPECT_TRUE(at_eof(unasked.read.get())) << "an fd nobody asked for was leaked";
}

// An older rootfs's run init says 'I' where this nsbox expects 'U': the run
// is refused with what to do, and the fd that came with it is not leaked.
TEST(ForkMessages, AnotherTagIsRefusedAsAnotherVersionAndWhatCameWithItClosed) {
  StepSent s = step_sent('I');
  UniqueFd got;
  try {
    expect_from_fork(s.ch.ours.get(), 'U', s.errors.read.get(), "run init", &got);
    ADD_FAILURE() << "a wrong tag was taken";
  } catch (const SysError& e) {
    EXPECT_EQ(e.err(), EPROTO);
    EXPECT_NE(std::string(e.what()).find("its run init sent 'I' where 'U' (run init) was due"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("rebuild the rootfs"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(got.valid());
  EXPECT_TRUE(at_eof(s.carried.read.get())) << "the fd that came with the wrong tag is still open";
}

// A child that fails says why on the error pipe, then its end of the
// socket closes: the failure is reported in its own words.
TEST(ForkMessages, AChildsReportedFailureIsTheError) {
  SocketPair ch = seqpacket_pair();
  Pipe errors = make_pipe();
  report_child_failure(errors.write.get(), "pivot_root", "/newroot", EINVAL);
  ch.theirs.reset();
  try {
    expect_from_fork(ch.ours.get(), 'P', errors.read.get(), "run init");
    ADD_FAILURE() << "a closed socket was taken for the step";
  } catch (const SysError& e) {
    EXPECT_EQ(e.step(), "pivot_root");
    EXPECT_EQ(e.object(), "/newroot");
    EXPECT_EQ(e.err(), EINVAL);
  }
}

TEST(ForkMessages, AnEndWithoutAReportOrAMissingFdIsAnError) {
  SocketPair closed = seqpacket_pair();
  Pipe errors = make_pipe();
  closed.theirs.reset();
  try {
    expect_from_fork(closed.ours.get(), 'P', errors.read.get(), "run init");
    ADD_FAILURE() << "nothing was taken for the step";
  } catch (const SysError& e) {
    EXPECT_NE(std::string(e.what()).find("ended before run init"), std::string::npos) << e.what();
  }

  SocketPair bare = seqpacket_pair();
  ASSERT_EQ(::send(bare.theirs.get(), "L", 1, 0), 1);
  UniqueFd got;
  try {
    expect_from_fork(bare.ours.get(), 'L', errors.read.get(), "seccomp listener", &got);
    ADD_FAILURE() << "a step that must carry an fd was taken without one";
  } catch (const SysError& e) {
    EXPECT_EQ(e.err(), EPROTO);
    EXPECT_NE(std::string(e.what()).find("seccomp listener came without its fd"), std::string::npos) << e.what();
  }
}

TEST(ForkMessages, ARequestCarriesItsTextAndFdsInOneMessage) {
  SocketPair ch = seqpacket_pair();
  Pipe a = make_pipe();
  const int fds[] = {a.write.get(), a.read.get()};
  send_with_fds(ch.theirs.get(), "{\"x\":1}", fds, 2, "test request");
  char text[64] = {};
  iovec iov{text, sizeof text};
  alignas(cmsghdr) char control[256] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ASSERT_EQ(::recvmsg(ch.ours.get(), &msg, MSG_CMSG_CLOEXEC), 7);
  EXPECT_STREQ(text, "{\"x\":1}");
  size_t received = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    received = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < received; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      ::close(fd);
    }
  }
  EXPECT_EQ(received, 2u);
  EXPECT_THROW(send_with_fds(ch.theirs.get(), "x", fds, 64, "test request"), SysError);
}

}  // namespace
}  // namespace nsbox
