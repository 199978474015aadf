// The egress proxy's wire formats: HTTP proxy request heads and SOCKS5
// messages, parsed from bytes a sandbox sent. No sockets.
#include "nsbox/egress_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace nsbox {
namespace {

using namespace std::string_literals;

HttpProxyRequest parse_ok(const std::string& head) {
  auto parsed = parse_http_proxy_request(head);
  if (auto* e = std::get_if<HttpProxyError>(&parsed)) {
    ADD_FAILURE() << "refused with " << e->status << " " << e->message << ": " << head;
    return {};
  }
  return std::get<HttpProxyRequest>(parsed);
}

HttpProxyError parse_error(const std::string& head) {
  auto parsed = parse_http_proxy_request(head);
  if (auto* e = std::get_if<HttpProxyError>(&parsed)) return *e;
  ADD_FAILURE() << "parsed: " << head;
  return {0, "(parsed)"};
}

// ---- HTTP: CONNECT ----

TEST(EgressProtocol, ConnectHostPort) {
  HttpProxyRequest r = parse_ok("CONNECT API.Example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n");
  EXPECT_EQ(r.protocol, ProxyProtocol::kHttpConnect);
  EXPECT_EQ(r.target.host, "api.example.com");
  EXPECT_EQ(r.target.port, 443);
  EXPECT_FALSE(r.target.address);
  EXPECT_TRUE(r.upstream_head.empty());
  EXPECT_STREQ(to_string(r.protocol), "http-connect");

  r = parse_ok("CONNECT example.com.:8443 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.target.host, "example.com") << "normalized: lower case, no trailing dot";
  EXPECT_EQ(r.target.port, 8443);
}

TEST(EgressProtocol, ConnectAddressLiterals) {
  HttpProxyRequest r = parse_ok("CONNECT 203.0.113.7:443 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.target.address);
  EXPECT_FALSE(r.target.address->v6);
  EXPECT_EQ(r.target.host, "203.0.113.7");
  EXPECT_EQ(r.target.port, 443);

  r = parse_ok("CONNECT [2001:DB8::1]:443 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.target.address);
  EXPECT_TRUE(r.target.address->v6);
  EXPECT_EQ(r.target.host, "2001:db8::1");
  EXPECT_EQ(r.target.port, 443);
}

TEST(EgressProtocol, ConnectBadAuthority) {
  for (const char* target : {"example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:443x",
                             "example.com:-1", "example.com: 443", "2001:db8::1:443", "[2001:db8::1]", "[2001:db8::1",
                             "[example.com]:443", "[127.0.0.1]:443", "[::1]x:443", ":443", "exa mple.com:443",
                             "a..b:443", ".a:443", "user@example.com:443", "example.com:443/path"}) {
    HttpProxyError e = parse_error("CONNECT "s + target + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(e.status, 400) << target << ": " << e.message;
  }
  HttpProxyError e = parse_error("CONNECT example.com HTTP/1.1\r\n\r\n");
  EXPECT_NE(e.message.find("CONNECT needs host:port"), std::string::npos) << e.message;
  EXPECT_EQ(parse_ok("CONNECT example.com:65535 HTTP/1.1\r\n\r\n").target.port, 65535);
}

// ---- HTTP: absolute-URI forwarding ----

TEST(EgressProtocol, ForwardRewritesToOriginForm) {
  HttpProxyRequest r = parse_ok(
      "GET http://Example.com:8080/a/b?x=1&y=%20#frag HTTP/1.1\r\n"
      "User-Agent: t/1\r\n"
      "Accept: */*\r\n"
      "\r\n");
  EXPECT_EQ(r.protocol, ProxyProtocol::kHttpForward);
  EXPECT_STREQ(to_string(r.protocol), "http");
  EXPECT_EQ(r.target.host, "example.com");
  EXPECT_EQ(r.target.port, 8080);
  EXPECT_EQ(r.upstream_head,
            "GET /a/b?x=1&y=%20 HTTP/1.1\r\n"
            "Host: example.com:8080\r\n"
            "User-Agent: t/1\r\n"
            "Accept: */*\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_EQ(r.content_length, 0u);
  EXPECT_FALSE(r.chunked);
}

TEST(EgressProtocol, ForwardPaths) {
  struct Case {
    const char* uri;
    const char* request_line;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"http://example.com", "GET / HTTP/1.1\r\n"},
           {"http://example.com/", "GET / HTTP/1.1\r\n"},
           {"http://example.com?q=1", "GET /?q=1 HTTP/1.1\r\n"},
           {"http://example.com#top", "GET / HTTP/1.1\r\n"},
           {"http://example.com/p#a?b", "GET /p HTTP/1.1\r\n"},
           {"HTTP://example.com/x", "GET /x HTTP/1.1\r\n"},
       }) {
    HttpProxyRequest r = parse_ok("GET "s + c.uri + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.upstream_head.substr(0, r.upstream_head.find("\r\n") + 2), c.request_line) << c.uri;
    EXPECT_EQ(r.target.host, "example.com") << c.uri;
    EXPECT_EQ(r.target.port, 80) << c.uri;
  }
}

TEST(EgressProtocol, ForwardHostHeader) {
  // Added without a port when the port is 80.
  HttpProxyRequest r = parse_ok("GET http://example.com/ HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.upstream_head, "GET / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n");
  // With the port otherwise.
  r = parse_ok("GET http://example.com:81/ HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.upstream_head, "GET / HTTP/1.1\r\nHost: example.com:81\r\nConnection: close\r\n\r\n");
  // The URI's authority wins over a Host header the client wrote: the
  // upstream serves the host that was checked (and there is one Host).
  r = parse_ok("GET http://example.com:81/ HTTP/1.1\r\nhost: evil.example.net\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(r.upstream_head, "GET / HTTP/1.1\r\nHost: example.com:81\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  // An IPv6 literal goes in brackets.
  r = parse_ok("GET http://[2001:db8::1]:8080/ HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.target.address);
  EXPECT_EQ(r.upstream_head, "GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nConnection: close\r\n\r\n");
  // Two Host headers are refused.
  HttpProxyError e = parse_error("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: b.example\r\n\r\n");
  EXPECT_EQ(e.status, 400);
}

TEST(EgressProtocol, ForwardDropsHopByHopHeaders) {
  HttpProxyRequest r = parse_ok(
      "POST http://example.com/submit HTTP/1.1\r\n"
      "Host: example.com\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"
      "Connection: keep-alive, X-Secret ,x-other\r\n"
      "X-Secret: s3cr3t\r\n"
      "X-Other: 1\r\n"
      "Keep-Alive: timeout=5\r\n"
      "TE: trailers\r\n"
      "Trailer: X-Sum\r\n"
      "Upgrade: h2c\r\n"
      "Proxy-Authenticate: Basic\r\n"
      "X-Kept:   value with spaces  \r\n"
      "Content-Length: 3\r\n"
      "\r\n");
  EXPECT_EQ(r.upstream_head,
            "POST /submit HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "X-Kept: value with spaces\r\n"
            "Content-Length: 3\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_EQ(r.content_length, 3u);
  EXPECT_FALSE(r.chunked);
}

TEST(EgressProtocol, ForwardConnectionCannotDropTheBodyFraming) {
  // "Connection: Content-Length" must not strip the length the proxy relays by.
  HttpProxyRequest r = parse_ok(
      "POST http://example.com/ HTTP/1.1\r\nConnection: Content-Length, Transfer-Encoding\r\n"
      "Content-Length: 4\r\n\r\n");
  EXPECT_EQ(r.content_length, 4u);
  EXPECT_NE(r.upstream_head.find("\r\nContent-Length: 4\r\n"), std::string::npos) << r.upstream_head;
  r = parse_ok(
      "POST http://example.com/ HTTP/1.1\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(r.chunked);
  EXPECT_NE(r.upstream_head.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos) << r.upstream_head;
}

TEST(EgressProtocol, ForwardBodyFraming) {
  HttpProxyRequest r = parse_ok("POST http://example.com/ HTTP/1.1\r\nContent-Length: 12345\r\n\r\n");
  EXPECT_EQ(r.content_length, 12345u);
  EXPECT_FALSE(r.chunked);

  r = parse_ok("POST http://example.com/ HTTP/1.1\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n");
  EXPECT_EQ(r.content_length, 7u) << "repeated equal values are one length";

  r = parse_ok("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.content_length, 0u);
  EXPECT_NE(r.upstream_head.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos)
      << "the body is relayed as sent, so its framing goes along";

  r = parse_ok("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n");
  EXPECT_TRUE(r.chunked);
  r = parse_ok("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(r.chunked);
}

// ---- HTTP: refusals ----

TEST(EgressProtocol, RefusesOriginFormTarget) {
  HttpProxyError e = parse_error("GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("send an absolute URI"), std::string::npos) << e.message;
}

TEST(EgressProtocol, RefusesHttpsAbsoluteUri) {
  HttpProxyError e = parse_error("GET https://example.com/ HTTP/1.1\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("use CONNECT for https://"), std::string::npos) << e.message;
  EXPECT_EQ(parse_error("GET ftp://example.com/ HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse_error("GET httpx://example.com/ HTTP/1.1\r\n\r\n").status, 400);
}

TEST(EgressProtocol, RefusesUserinfo) {
  HttpProxyError e = parse_error("GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("credentials"), std::string::npos) << e.message;
  EXPECT_EQ(parse_error("GET http://evil.com@example.com/ HTTP/1.1\r\n\r\n").status, 400);
  // An '@' in the path is not userinfo.
  EXPECT_EQ(parse_ok("GET http://example.com/a@b HTTP/1.1\r\n\r\n").target.host, "example.com");
}

TEST(EgressProtocol, RefusesMalformedHeads) {
  for (const std::string& head : {
           "GET http://example.com/ HTTP/1.1\nHost: a\r\n\r\n"s,           // bare LF
           "GET http://example.com/ HTTP/1.1\r\nX-A: 1\nX-B: 2\r\n\r\n"s,  // bare LF in a header
           "GET http://example.com/ HTTP/1.1\r\nX-A: 1\rX-B: 2\r\n\r\n"s,  // bare CR
           "GET http://example.com/ HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n"s,    // obs-fold
           "GET http://example.com/ HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n"s,   // obs-fold, tab
           "GET http://example.com/ HTTP/1.1\r\nX-A: a\0b\r\n\r\n"s,       // NUL
           "GET http://exam\0ple.com/ HTTP/1.1\r\n\r\n"s,                  // NUL in the target
           "GET  http://example.com/ HTTP/1.1\r\n\r\n"s,                   // two spaces
           "GET http://example.com/ HTTP/1.1 \r\n\r\n"s,                   // trailing space
           "GET http://example.com/\r\n\r\n"s,                             // no version
           " GET http://example.com/ HTTP/1.1\r\n\r\n"s,                   // leading space
           "G(T http://example.com/ HTTP/1.1\r\n\r\n"s,                    // method not a token
           "GET http://example.com/ HTTP/1.1\r\nHost : a\r\n\r\n"s,        // space before colon
           "GET http://example.com/ HTTP/1.1\r\nno colon\r\n\r\n"s,        // no colon
           "GET http://example.com/ HTTP/1.1\r\n: empty name\r\n\r\n"s,    // empty name
           "GET http://example.com/ HTTP/1.1\r\n"s,                        // incomplete
           "\r\n\r\n"s,
       }) {
    HttpProxyError e = parse_error(head);
    EXPECT_EQ(e.status, 400) << testing::PrintToString(head) << ": " << e.message;
  }
}

TEST(EgressProtocol, RefusesAmbiguousBodies) {
  HttpProxyError e =
      parse_error("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("both Content-Length and Transfer-Encoding"), std::string::npos) << e.message;

  e = parse_error("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("conflicting Content-Length"), std::string::npos) << e.message;

  for (const char* cl : {"-1", "+5", "5, 5", "0x10", "", "1234567890123456789", "5 5"}) {
    e = parse_error("POST http://example.com/ HTTP/1.1\r\nContent-Length: "s + cl + "\r\n\r\n");
    EXPECT_EQ(e.status, 400) << cl;
    EXPECT_EQ(e.message, "bad Content-Length") << cl;
  }
}

TEST(EgressProtocol, RefusesTransferEncodingOtherThanChunked) {
  for (const char* te : {"gzip", "chunked, gzip", "identity", "chunkedx"}) {
    HttpProxyError e = parse_error("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: "s + te + "\r\n\r\n");
    EXPECT_EQ(e.status, 501) << te << ": " << e.message;
  }
  HttpProxyError e =
      parse_error("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n");
  EXPECT_EQ(e.status, 501) << "chunked must be the last coding";
}

TEST(EgressProtocol, RefusesOtherHttpVersions) {
  for (const char* version : {"HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "http/1.1", "HTTP/1.1x", "HTTP/1"}) {
    HttpProxyError e = parse_error("GET http://example.com/ "s + version + "\r\n\r\n");
    EXPECT_EQ(e.status, 505) << version;
  }
  EXPECT_EQ(parse_error("CONNECT example.com:443 HTTP/2\r\n\r\n").status, 505);
}

TEST(EgressProtocol, RefusesHeadsLargerThan16KiB) {
  std::string prefix = "GET http://example.com/ HTTP/1.1\r\nX-Pad: ";
  std::string suffix = "\r\n\r\n";
  std::string at_limit = prefix + std::string(kMaxProxyHeadBytes - prefix.size() - suffix.size(), 'a') + suffix;
  ASSERT_EQ(at_limit.size(), kMaxProxyHeadBytes);
  EXPECT_EQ(parse_ok(at_limit).protocol, ProxyProtocol::kHttpForward);

  std::string over = prefix + std::string(kMaxProxyHeadBytes - prefix.size() - suffix.size() + 1, 'a') + suffix;
  HttpProxyError e = parse_error(over);
  EXPECT_EQ(e.status, 431);
}

TEST(EgressProtocol, FindHeadEnd) {
  EXPECT_EQ(find_head_end(""), 0u);
  EXPECT_EQ(find_head_end("GET http://a/ HTTP/1.1\r\n"), 0u);
  EXPECT_EQ(find_head_end("GET http://a/ HTTP/1.1\r\n\r"), 0u);
  EXPECT_EQ(find_head_end("GET http://a/ HTTP/1.1\n\n"), 0u);
  EXPECT_EQ(find_head_end("\r\n\r\n"), 4u);
  const std::string head = "CONNECT a:443 HTTP/1.1\r\n\r\n";
  EXPECT_EQ(find_head_end(head), head.size());
  EXPECT_EQ(find_head_end(head + "early tunnel data\r\n\r\n"), head.size()) << "the first end";
}

TEST(EgressProtocol, HttpProxyResponse) {
  const std::string body = "nsbox egress: denied example.com:443: no rule\n";
  std::string r = http_proxy_response(403, body);
  EXPECT_EQ(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\nConnection: close\r\n"), std::string::npos) << r;
  size_t end = find_head_end(r);
  ASSERT_NE(end, 0u);
  EXPECT_EQ(r.substr(end), body);

  EXPECT_EQ(http_proxy_response(200, ""), "HTTP/1.1 200 Connection established\r\n\r\n");
  for (auto [status, line] : std::initializer_list<std::pair<int, const char*>>{
           {400, "HTTP/1.1 400 Bad Request\r\n"},
           {408, "HTTP/1.1 408 Request Timeout\r\n"},
           {431, "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
           {501, "HTTP/1.1 501 Not Implemented\r\n"},
           {502, "HTTP/1.1 502 Bad Gateway\r\n"},
           {504, "HTTP/1.1 504 Gateway Timeout\r\n"},
           {505, "HTTP/1.1 505 HTTP Version Not Supported\r\n"},
       }) {
    std::string resp = http_proxy_response(status, "");
    EXPECT_EQ(resp.rfind(line, 0), 0u) << resp;
    EXPECT_NE(resp.find("Content-Length: 0\r\n\r\n"), std::string::npos) << resp;
  }
}

// ---- SOCKS5 ----

TEST(EgressProtocol, Socks5GreetingNeedsMoreAtEveryPrefix) {
  const std::string greeting("\x05\x02\x02\x00", 4);
  for (size_t n = 0; n < greeting.size(); ++n) {
    size_t consumed = 99;
    Socks5Greeting g;
    EXPECT_EQ(parse_socks5_greeting(greeting.substr(0, n), consumed, g), ParseState::kNeedMore) << n;
    EXPECT_EQ(consumed, 99u) << "untouched until done";
  }
  size_t consumed = 0;
  Socks5Greeting g;
  EXPECT_EQ(parse_socks5_greeting(greeting + "extra", consumed, g), ParseState::kDone);
  EXPECT_EQ(consumed, 4u);
  EXPECT_TRUE(g.offers_no_auth);
}

TEST(EgressProtocol, Socks5GreetingMethods) {
  size_t consumed = 0;
  Socks5Greeting g;
  EXPECT_EQ(parse_socks5_greeting(std::string("\x05\x01\x00", 3), consumed, g), ParseState::kDone);
  EXPECT_TRUE(g.offers_no_auth);
  EXPECT_EQ(consumed, 3u);

  g = {};
  EXPECT_EQ(parse_socks5_greeting(std::string("\x05\x02\x01\x02", 4), consumed, g), ParseState::kDone);
  EXPECT_FALSE(g.offers_no_auth) << "GSSAPI and user/password only";
  EXPECT_EQ(consumed, 4u);

  EXPECT_EQ(parse_socks5_greeting(std::string("\x04\x01\x00", 3), consumed, g), ParseState::kError);
  EXPECT_EQ(parse_socks5_greeting(std::string("\x04", 1), consumed, g), ParseState::kError) << "decided at once";
  EXPECT_EQ(parse_socks5_greeting("GET http://a/ HTTP/1.1\r\n\r\n", consumed, g), ParseState::kError);
  EXPECT_EQ(parse_socks5_greeting(std::string("\x05\x00", 2), consumed, g), ParseState::kError) << "no methods";
}

std::string socks_request(uint8_t cmd, uint8_t atyp, const std::string& address, uint16_t port) {
  std::string out{'\x05', static_cast<char>(cmd), '\0', static_cast<char>(atyp)};
  if (atyp == 3) out += static_cast<char>(address.size());
  out += address;
  out += static_cast<char>(port >> 8);
  out += static_cast<char>(port & 0xff);
  return out;
}

Socks5Request socks_ok(const std::string& msg) {
  size_t consumed = 0;
  Socks5Request r;
  EXPECT_EQ(parse_socks5_request(msg, consumed, r), ParseState::kDone) << testing::PrintToString(msg);
  EXPECT_EQ(consumed, msg.size());
  return r;
}

uint8_t socks_error(const std::string& msg) {
  size_t consumed = 99;
  Socks5Request r;
  EXPECT_EQ(parse_socks5_request(msg, consumed, r), ParseState::kError) << testing::PrintToString(msg);
  EXPECT_EQ(consumed, 99u);
  return r.error_reply;
}

TEST(EgressProtocol, Socks5RequestIpv4) {
  Socks5Request r = socks_ok(socks_request(1, 1, std::string("\xcb\x00\x71\x07", 4), 443));
  ASSERT_TRUE(r.target.address);
  EXPECT_FALSE(r.target.address->v6);
  EXPECT_EQ(r.target.host, "203.0.113.7");
  EXPECT_EQ(r.target.port, 443);
  EXPECT_EQ(socks_ok(socks_request(1, 1, std::string(4, '\x7f'), 0xfffe)).target.port, 0xfffe) << "big-endian";
}

TEST(EgressProtocol, Socks5RequestIpv6) {
  std::string addr(16, '\0');
  addr[0] = '\x20';
  addr[1] = '\x01';
  addr[2] = '\x0d';
  addr[3] = '\xb8';
  addr[15] = '\x01';
  Socks5Request r = socks_ok(socks_request(1, 4, addr, 8080));
  ASSERT_TRUE(r.target.address);
  EXPECT_TRUE(r.target.address->v6);
  EXPECT_EQ(r.target.host, "2001:db8::1");
  EXPECT_EQ(r.target.port, 8080);
}

TEST(EgressProtocol, Socks5RequestDomain) {
  Socks5Request r = socks_ok(socks_request(1, 3, "API.Example.COM.", 443));
  EXPECT_FALSE(r.target.address);
  EXPECT_EQ(r.target.host, "api.example.com");
  EXPECT_EQ(r.target.port, 443);

  // An address sent as a domain is still an address (checked as one).
  r = socks_ok(socks_request(1, 3, "127.0.0.1", 80));
  ASSERT_TRUE(r.target.address);
  EXPECT_EQ(r.target.host, "127.0.0.1");

  // Trailing bytes (early data) are not consumed.
  std::string msg = socks_request(1, 3, "localhost", 80);
  size_t consumed = 0;
  Socks5Request r2;
  EXPECT_EQ(parse_socks5_request(msg + "GET / HTTP/1.1\r\n", consumed, r2), ParseState::kDone);
  EXPECT_EQ(consumed, msg.size());
  EXPECT_EQ(r2.target.host, "localhost");
}

TEST(EgressProtocol, Socks5RequestRefusals) {
  EXPECT_EQ(socks_error(socks_request(1, 1, std::string(4, '\x0a'), 0)), kSocksGeneralFailure) << "port 0";
  EXPECT_EQ(socks_error(socks_request(2, 1, std::string(4, '\x0a'), 80)), kSocksCommandNotSupported) << "BIND";
  EXPECT_EQ(socks_error(socks_request(3, 1, std::string(4, '\x0a'), 80)), kSocksCommandNotSupported) << "UDP";
  EXPECT_EQ(kSocksCommandNotSupported, 0x07);
  EXPECT_EQ(socks_error(socks_request(1, 8, "", 80)), kSocksAddressTypeNotSupported);
  EXPECT_EQ(kSocksAddressTypeNotSupported, 0x08);
  EXPECT_EQ(socks_error(socks_request(1, 3, "", 80)), kSocksGeneralFailure) << "empty domain";
  EXPECT_EQ(socks_error(socks_request(1, 3, "exa mple.com", 80)), kSocksGeneralFailure);
  EXPECT_EQ(socks_error(socks_request(1, 3, std::string("a\0b", 3), 80)), kSocksGeneralFailure);
  EXPECT_EQ(socks_error(socks_request(1, 3, "a..b", 80)), kSocksGeneralFailure);
  EXPECT_EQ(socks_error(socks_request(1, 3, std::string(254, 'a'), 80)), kSocksGeneralFailure) << "> 253 bytes";

  std::string bad_version = socks_request(1, 1, std::string(4, '\x0a'), 80);
  bad_version[0] = '\x04';
  EXPECT_EQ(socks_error(bad_version), kSocksGeneralFailure);
  std::string bad_reserved = socks_request(1, 1, std::string(4, '\x0a'), 80);
  bad_reserved[2] = '\x01';
  EXPECT_EQ(socks_error(bad_reserved), kSocksGeneralFailure);
}

TEST(EgressProtocol, Socks5RequestNeedsMoreAtEveryTruncation) {
  for (const std::string& msg :
       {socks_request(1, 1, std::string(4, '\x7f'), 80), socks_request(1, 4, std::string(16, '\x20'), 443),
        socks_request(1, 3, "localhost", 8080)}) {
    for (size_t n = 0; n < msg.size(); ++n) {
      size_t consumed = 99;
      Socks5Request r;
      EXPECT_EQ(parse_socks5_request(msg.substr(0, n), consumed, r), ParseState::kNeedMore)
          << n << " of " << testing::PrintToString(msg);
      EXPECT_EQ(consumed, 99u);
    }
    socks_ok(msg);
  }
}

TEST(EgressProtocol, Socks5Reply) {
  EXPECT_EQ(socks5_reply(kSocksSucceeded), std::string("\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10));
  EXPECT_EQ(socks5_reply(kSocksNotAllowed), std::string("\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00", 10));
  EXPECT_EQ(socks5_reply(kSocksConnectionRefused), std::string("\x05\x05\x00\x01\x00\x00\x00\x00\x00\x00", 10));
  // A reply is itself a well-formed SOCKS5 message shape: 10 bytes for IPv4.
  EXPECT_EQ(socks5_reply(kSocksCommandNotSupported).size(), 10u);
}

TEST(EgressProtocol, ParseTargetHost) {
  ProxyTarget t;
  EXPECT_TRUE(parse_target_host("Sub_domain.Example.org", t));
  EXPECT_EQ(t.host, "sub_domain.example.org");
  EXPECT_FALSE(t.address);
  EXPECT_TRUE(parse_target_host("[::1]", t));
  ASSERT_TRUE(t.address);
  EXPECT_EQ(t.host, "::1");
  EXPECT_TRUE(parse_target_host("example.org", t));
  EXPECT_FALSE(t.address) << "reset when a name follows an address";
  for (const char* bad : {"", ".", ".a", "a..b", "a b", "a/b", "a:b", "a@b", "ex%61mple.org", "\xc3\xa9.org"}) {
    EXPECT_FALSE(parse_target_host(bad, t)) << bad;
  }
  EXPECT_TRUE(parse_target_host(std::string(253, 'a'), t));
  EXPECT_FALSE(parse_target_host(std::string(254, 'a'), t));
}

}  // namespace
}  // namespace nsbox
