// ChunkedFraming: the node's bound on a chunked body's framing lines,
// which must read a body exactly as cpp-httplib 0.11 does.
#include "nsbox/chunked_framing.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace nsbox
