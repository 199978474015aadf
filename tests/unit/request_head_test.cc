#include "nsbox/request_head.h"

#include <gtest/gtest.h>

#include <string>

namespace nsbox {
namespace {

std::string error_of(const std::string& head) {
  RequestHead parsed;
  return parse_request_head(head, parsed);
}

TEST(RequestHead, ParsesTheRequestLineAndHeadersInOrderWithoutSurroundingBlanks) {
  RequestHead h;
  ASSERT_EQ(parse_request_head("POST /run?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization:\tBearer t \r\nX-Empty:\r\n"
                               "authorization: Bearer second\r\n\r\n",
                               h),
            "");
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/run?x=1");
  EXPECT_EQ(h.version, "HTTP/1.1");
  ASSERT_EQ(h.headers.size(), 4u);
  EXPECT_EQ(h.headers[1].first, "Authorization");
  EXPECT_EQ(h.headers[1].second, "Bearer t");
  EXPECT_EQ(h.headers[2].second, "");
  EXPECT_EQ(h.headers[3].first, "authorization");
  EXPECT_EQ(h.headers[3].second, "Bearer second");
  EXPECT_EQ(parse_request_head("GET / HTTP/1.0\r\n\r\n", h), "");
  EXPECT_TRUE(h.headers.empty());
  EXPECT_EQ(h.version, "HTTP/1.0");
}

// The error goes to the client and the audit log: it names the header
// line by its number and name, never by its value (a token, say).
TEST(RequestHead, AnErrorNeverQuotesAHeadersValue) {
  const std::string end = "\r\n\r\n";
  const std::string token = "acme-token-0123456789abcdef";
  const std::string before = "POST /run HTTP/1.1\r\nHost: x\r\n";
  for (const std::string& bad : {"Authorization: Bearer " + token + "\x01", "Authorization: Bearer " + token + "\rX",
                                 "Host: y\r\n Bearer " + token, "Bearer " + token, "Bearer " + token + ": x",
                                 "Authorization: Bearer " + token + std::string(8200, 'a')}) {
    const std::string error = error_of(before + bad + end);
    EXPECT_FALSE(error.empty()) << bad;
    EXPECT_EQ(error.find("0123456789"), std::string::npos) << error;
  }
  EXPECT_EQ(error_of(before + "Authorization: Bearer " + token + "\x01" + end),
            "malformed header line 2 (\"Authorization\"): its value holds a control byte");
  EXPECT_EQ(error_of(before + "no colon" + end), "malformed header line 2: it has no colon");
}

// What cpp-httplib 0.11 reads leniently, and a proxy in front may read
// differently, is refused with what is wrong.
TEST(RequestHead, RefusesWhatAParserCouldReadTwoWays) {
  const std::string end = "\r\n\r\n";
  EXPECT_NE(error_of("POST /run HTTP/1.1\r\nTransfer-Encoding : chunked" + end).find("the name before the colon"),
            std::string::npos);
  EXPECT_NE(error_of("POST /run HTTP/1.1\r\nX: 1\nTransfer-Encoding: chunked" + end).find("bare LF"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("GET / HTTP/1.1\r\nX: a\0b", 22) + end).find("control byte"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\nX: a\rb" + end).find("bare CR"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\nX: a\r\n folded" + end).find("folded"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\nno colon here" + end).find("no colon"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\n: empty name" + end).find("the name before the colon"), std::string::npos);
  EXPECT_NE(error_of("GET  / HTTP/1.1" + end).find("one space apart"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1 " + end).find("one space apart"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/2.0" + end).find("version"), std::string::npos);
  EXPECT_NE(error_of("G(T / HTTP/1.1" + end).find("method"), std::string::npos);
  EXPECT_NE(error_of("GET /\x7f HTTP/1.1" + end).find("target"), std::string::npos);
  // cpp-httplib takes the path from the first part of the target that is
  // not empty: "?/run" would be /run to it, and "" to a plain split.
  EXPECT_NE(error_of("POST ?/run HTTP/1.1" + end).find("neither a path starting with / nor *"), std::string::npos);
  EXPECT_NE(error_of("POST http://x/run HTTP/1.1" + end).find("neither a path"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\nX: " + std::string(8188, 'a') + end).find("longer than 8192 bytes"),
            std::string::npos);
  EXPECT_NE(error_of("\r\nGET / HTTP/1.1" + end).find("starts with an empty line"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\nHost: x\r\n").find("does not end"), std::string::npos);
  EXPECT_NE(error_of("GET / HTTP/1.1\r\n\r\nmore").find("goes on past"), std::string::npos);
}

TEST(RequestHead, AValuesVisibleBytesTabsAndObsTextAreKept) {
  RequestHead h;
  // Raw UTF-8 in a target and * for OPTIONS, as curl sends them.
  ASSERT_EQ(parse_request_head("GET /health?q=\xc3\xa9 HTTP/1.1\r\n\r\n", h), "");
  ASSERT_EQ(parse_request_head("OPTIONS * HTTP/1.1\r\n\r\n", h), "");
  ASSERT_EQ(parse_request_head("GET / HTTP/1.1\r\nX: " + std::string(8187, 'a') + "\r\n\r\n", h),
            "");  // 8192 with its CRLF
  ASSERT_EQ(parse_request_head("GET / HTTP/1.1\r\nX: a\tb \xe4\xb8\xad \"q\"\r\n\r\n", h), "");
  ASSERT_EQ(h.headers.size(), 1u);
  EXPECT_EQ(h.headers[0].second, "a\tb \xe4\xb8\xad \"q\"");
}

TEST(RequestHead, AnErrorQuotesTheRequestLineWithItsControlBytesEscapedAndCut) {
  const std::string error = error_of("GET /\x01" + std::string(200, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_NE(error.find("\"GET /\\x01aaa"), std::string::npos) << error;
  EXPECT_NE(error.find("\"..."), std::string::npos) << error;
  EXPECT_LT(error.size(), 200u) << error;
}

}  // namespace
}  // namespace nsbox
