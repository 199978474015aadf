// ChunkedFraming: the node's bound on a chunked body's framing lines,
// which must read a body exactly as cpp-httplib 0.11 does.
#include "nsbox/chunked_framing.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

const std::string kHead = "POST /run HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";

// Fed whole, and again a byte at a time: the verdict may not depend on how
// the bytes came.
struct Verdict {
  bool too_long;
  bool over;
};
Verdict fed(const std::string& bytes) {
  ChunkedFraming whole;
  whole.feed(bytes.data(), bytes.size());
  ChunkedFraming bytewise;
  for (char c : bytes) bytewise.feed(&c, 1);
  EXPECT_EQ(whole.too_long(), bytewise.too_long());
  EXPECT_EQ(whole.over(), bytewise.over());
  return {whole.too_long(), whole.over()};
}

TEST(ChunkedFraming, ASoundBodyEndsWithoutComplaint) {
  const Verdict v = fed(kHead + "5\r\nhello\r\n1a;name=value\r\n" + std::string(26, 'x') + "\r\n0\r\n\r\n");
  EXPECT_FALSE(v.too_long);
  EXPECT_TRUE(v.over);
}

// What cpp-httplib reads leniently, and a proxy in front may read another
// way, is named as malformed; sound framing, extensions included, is not.
TEST(ChunkedFraming, FramingReadLenientlyIsMalformed) {
  auto malformed = [](const std::string& body) {
    ChunkedFraming f;
    const std::string bytes = kHead + body;
    f.feed(bytes.data(), bytes.size());
    return f.malformed() != nullptr;
  };
  for (const std::string bad : {"0x5\r\nhello\r\n0\r\n\r\n", " 5\r\nhello\r\n0\r\n\r\n", "+5\r\nhello\r\n0\r\n\r\n",
                                "-5\r\nhello", "5x\r\nhello\r\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n",
                                "5 \r\nhello\r\n0\r\n\r\n", "00000000000000005\r\nhello\r\n0\r\n\r\n",
                                "5\r\nhelloXY\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"})
    EXPECT_TRUE(malformed(bad)) << ::testing::PrintToString(bad);
  for (const std::string good :
       {"5\r\nhello\r\n0\r\n\r\n", "5;a=1\r\nhello\r\n0;b\r\n\r\n", "5 ;a=\"x y\"\r\nhello\r\n0\r\n\r\n",
        "A\r\n0123456789\r\n0\r\n\r\n", "0000000000000005\r\nhello\r\n0\r\n\r\n"})
    EXPECT_FALSE(malformed(good)) << ::testing::PrintToString(good);
}

TEST(ChunkedFraming, ChunkDataIsNotALineHoweverLong) {
  // A megabyte without a line end, inside a chunk: data, not framing.
  const Verdict v = fed(kHead + "100000\r\n" + std::string(0x100000, 'a') + "\r\n0\r\n\r\n");
  EXPECT_FALSE(v.too_long);
  EXPECT_TRUE(v.over);
}

TEST(ChunkedFraming, ASizeLinePastTheBoundIsTooLong) {
  // Exactly at the bound, line end included: let through.
  const std::string at_bound = "1;" + std::string(kMaxFramingLine - 4, 'e') + "\r\n";
  ASSERT_EQ(at_bound.size(), kMaxFramingLine);
  EXPECT_FALSE(fed(kHead + at_bound + "x\r\n0\r\n\r\n").too_long);
  // One byte more is refused, also before its line end arrives.
  const std::string past = "1;" + std::string(kMaxFramingLine - 2, 'e');
  EXPECT_TRUE(fed(kHead + past).too_long);
  EXPECT_FALSE(fed(kHead + past.substr(0, past.size() - 1)).too_long);
  // Digits alone, the attack on cpp-httplib's line reader.
  EXPECT_TRUE(fed(kHead + std::string(1 << 20, '1')).too_long);
}

TEST(ChunkedFraming, TheLinesAfterAChunkAndAfterTheLastAreBoundedToo) {
  EXPECT_TRUE(fed(kHead + "2\r\nab" + std::string(kMaxFramingLine, ' ')).too_long);
  EXPECT_TRUE(fed(kHead + "0\r\n" + std::string(kMaxFramingLine, 'T')).too_long);
  // A second chunk's size line, after a sound first chunk.
  EXPECT_TRUE(fed(kHead + "2\r\nab\r\n" + std::string(kMaxFramingLine, 'f')).too_long);
}

TEST(ChunkedFraming, TheHeadEndsWhereCppHttplibEndsIt) {
  // A bare LF ends no head: "\n\n" is skipped by cpp-httplib, so what
  // follows is still head, and long head lines are not framing.
  const std::string head = "POST /run HTTP/1.1\r\nX: " + std::string(20000, 'h') + "\n\n" + std::string(20000, 'h');
  EXPECT_FALSE(fed(head).too_long);
  EXPECT_FALSE(fed(head).over);
  // The request line's own CRLF followed by CRLF ends it.
  EXPECT_TRUE(fed("POST /run HTTP/1.1\r\n\r\n" + std::string(kMaxFramingLine, '1')).too_long);
}

TEST(ChunkedFraming, WhatCppHttplibStopsAtEndsTheWatch) {
  // No digits (cpp-httplib refuses the body), a size it cannot hold, a
  // chunk not followed by CRLF (it ends the body there), and the last line,
  // whatever it holds: nothing after them is read as framing.
  const std::string after(2 * kMaxFramingLine, 'z');
  for (const std::string& body : {"zz\r\n" + after, "ffffffffffffffffffff\r\n" + after, "-1\r\n" + after,
                                  "2\r\nabX\r\n" + after, "0\r\ntrailer: x\r\n" + after}) {
    const Verdict v = fed(kHead + body);
    EXPECT_FALSE(v.too_long) << body.substr(0, 30);
    EXPECT_TRUE(v.over) << body.substr(0, 30);
  }
}

TEST(ChunkedFraming, SizesAreReadAsStrtoulReadsThem) {
  // Leading blanks and a 0x prefix are taken, so the data is 16 bytes; an
  // embedded NUL ends the line's text; a huge size is data to its end.
  EXPECT_TRUE(fed(kHead + " 0x10\r\n" + std::string(16, 'd') + "\r\n0\r\n\r\n").over);
  EXPECT_FALSE(fed(kHead + " 0x10\r\n" + std::string(16, 'd') + "\r\n0\r\n\r\n").too_long);
  static constexpr char kNul[] = "1\0zz\r\nd\r\n0\r\n\r\n";
  EXPECT_TRUE(fed(kHead + std::string(kNul, sizeof kNul - 1)).over);
  const Verdict huge = fed(kHead + "-2\r\n" + std::string(3 * kMaxFramingLine, 'd'));
  EXPECT_FALSE(huge.too_long);
  EXPECT_FALSE(huge.over);
}

// cpp-httplib itself, in this process on loopback: what it makes of a
// chunked body, "whole N" or "broken N" (N bytes of data handed on).
class CppHttplibReading {
 public:
  CppHttplibReading() {
    server_.Post("/", [](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
      uint64_t size = 0;
      const bool whole = reader([&size](const char*, size_t n) {
        size += n;
        return true;
      });
      res.set_content((whole ? "whole " : "broken ") + std::to_string(size), "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~CppHttplibReading() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

  // The request sent whole, the answer read until cpp-httplib closes (the
  // request says Connection: close). The client's side stays open: after a
  // shutdown(SHUT_WR) cpp-httplib would take the peer as gone and not answer.
  std::string read(const std::string& request) const {
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const timeval bound{5, 0};
    ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!s || ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "connect failed";
    if (::send(s.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
      return "send failed";
    std::string answer;
    char buf[4096];
    for (ssize_t n; (n = ::recv(s.get(), buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<size_t>(n));
    const size_t body = answer.find("\r\n\r\n");
    return body == std::string::npos ? "no answer: " + answer : answer.substr(body + 4);
  }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
};

// A chunked body in the forms clients, and attackers, write: sizes with a
// 0x prefix, blanks, a sign, extensions, a NUL, a bare LF; data shorter or
// longer than its size; odd lines after a chunk and at the end.
std::string odd_chunked_body(std::mt19937& rng) {
  auto pick = [&rng](unsigned n) { return rng() % n; };
  static constexpr char kHex[] = "0123456789abcdef";
  std::string body;
  for (unsigned chunks = pick(4); chunks > 0; --chunks) {
    const size_t size = 1 + pick(40);
    std::string text;
    for (size_t v = size; v > 0; v /= 16) text.insert(text.begin(), kHex[v % 16]);
    if (pick(2)) std::transform(text.begin(), text.end(), text.begin(), ::toupper);
    static const std::string kForms[] = {"0x", " ", "\t", "+", "-", "", "", ""};
    text = kForms[pick(8)] + text;
    static const std::string kAfter[] = {";ext=1", std::string("\0junk", 5), " ", ";a=\"b c\"", "", "", ""};
    text += kAfter[pick(7)];
    body += text + (pick(6) == 0 ? "\n" : "\r\n");
    const size_t data = pick(8) == 0 ? size + 2 - std::min<size_t>(size, pick(5)) : size;  // off by -2..+2
    for (size_t i = 0; i < data; ++i) body += pick(10) == 0 ? '\n' : static_cast<char>('a' + pick(26));
    static const std::string kLineAfter[] = {"X\r\n", "\n", "\r\r\n", "\r\n", "\r\n", "\r\n", "\r\n"};
    body += kLineAfter[pick(7)];
  }
  static const std::string kLast[] = {
      "0;e=1\r\n\r\n", "0\r\nTrailer: x\r\n\r\n", "00\r\n\r\n", "zz\r\n", "0\r\nx\r\n", "0\r\n\r\n", "0\r\n\r\n"};
  return body + kLast[pick(7)];
}

TEST(ChunkedFraming, ReadsOddBodiesExactlyAsCppHttplibDoes) {
  // Differential: where the parser says cpp-httplib is done with a body, it
  // must agree with cpp-httplib on whether the body is whole and on how
  // much data it holds; a disagreement is a place where the two would see
  // different lines, and a line the bound does not see.
  CppHttplibReading real;
  ASSERT_GT(real.port(), 0);
  std::mt19937 rng(20261204);
  const std::string head = "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
  int compared = 0;
  int whole = 0;
  for (int i = 0; i < 600; ++i) {
    const std::string request = head + odd_chunked_body(rng);
    ChunkedFraming framing;
    framing.feed(request.data(), request.size());
    ASSERT_FALSE(framing.too_long());
    if (!framing.over()) continue;  // waits for data that never comes: cpp-httplib reads to the end
    ++compared;
    whole += framing.accepted();
    const std::string expected =
        std::string(framing.accepted() ? "whole " : "broken ") + std::to_string(framing.data_bytes());
    EXPECT_EQ(real.read(request), expected) << ::testing::PrintToString(request);
  }
  // Enough of both kinds were compared for the check to mean something.
  EXPECT_GT(compared, 400);
  EXPECT_GT(whole, 100);
  EXPECT_GT(compared - whole, 80);
}

}  // namespace
}  // namespace nsbox
