// Capturing a sandbox's output: what is kept, and what is dropped past the cap.
#include "nsbox/io.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace nsbox {
namespace {

// Reads the pipe as the supervisor does until the writer is done and gone.
void capture_until_eof(OutputCapture& out) {
  while (out.open()) {
    pollfd p{out.fd(), POLLIN, 0};
    ASSERT_GE(::poll(&p, 1, 10000), 1) << "no end of file within 10 s";
    out.on_readable();
  }
}

TEST(OutputCapture, KeepsTheCapThenDropsTheRestToTheEnd) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  OutputCapture out(UniqueFd(fds[0]), 100000);
  const std::string chunk(65536, 'y');
  // 3 MiB: far more than the pipe holds, so the writer ends only if the
  // capture drains past its cap.
  std::thread writer([&] {
    std::string first(1000, 'x');
    for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<char>('a' + i % 26);
    ASSERT_EQ(::write(fds[1], first.data(), first.size()), static_cast<ssize_t>(first.size()));
    for (int i = 0; i < 48; ++i)
      for (size_t done = 0; done < chunk.size();) {
        const ssize_t n = ::write(fds[1], chunk.data() + done, chunk.size() - done);
        ASSERT_GT(n, 0);
        done += static_cast<size_t>(n);
      }
    ::close(fds[1]);
  });
  capture_until_eof(out);
  writer.join();
  EXPECT_TRUE(out.truncated());
  ASSERT_EQ(out.data().size(), 100000u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(out.data()[i], static_cast<char>('a' + i % 26)) << i;
  EXPECT_EQ(out.data().find_first_not_of('y', 1000), std::string::npos);
}

TEST(OutputCapture, BelowTheCapKeepsEverythingUntruncated) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  OutputCapture out(UniqueFd(fds[0]), 100000);
  ASSERT_EQ(::write(fds[1], "hello\n", 6), 6);
  ::close(fds[1]);
  capture_until_eof(out);
  EXPECT_FALSE(out.truncated());
  EXPECT_EQ(out.data(), "hello\n");
}

}  // namespace
}  // namespace nsbox
