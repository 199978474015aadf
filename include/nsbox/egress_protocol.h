// The egress proxy's wire formats: an HTTP proxy request head (CONNECT or an
// absolute-URI request) and SOCKS5 (RFC 1928, no authentication, CONNECT
// only). Parsers over bytes the sandbox sent: everything here is untrusted
// input, so they are strict, bounded and fuzzed (tests/fuzz/fuzz_egress.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "nsbox/egress_policy.h"

namespace nsbox {

// The largest request head the proxy reads.
constexpr size_t kMaxProxyHeadBytes = 16 * 1024;

enum class ProxyProtocol { kHttpConnect, kHttpForward, kSocks5 };
const char* to_string(ProxyProtocol protocol);  // "http-connect", "http", "socks5"

// Where a request wants to go: a normalized host name or an address literal.
struct ProxyTarget {
  std::string host;                  // normalized name, or the address as text
  std::optional<IpAddress> address;  // set when the request named an address
  uint16_t port = 0;
};

struct HttpProxyRequest {
  ProxyProtocol protocol = ProxyProtocol::kHttpConnect;
  ProxyTarget target;
  // kHttpForward: the head to send upstream (origin-form request line,
  // hop-by-hop headers dropped, "Connection: close" added) and how much body
  // follows it.
  std::string upstream_head;
  uint64_t content_length = 0;
  bool chunked = false;
};

struct HttpProxyError {
  int status = 400;  // 400, 405, 431, 501, 505
  std::string message;
};

// The end of the head (just past "\r\n\r\n") in buf, or 0 when not there yet.
size_t find_head_end(std::string_view buf);

// Parses a complete request head (ending in "\r\n\r\n").
std::variant<HttpProxyRequest, HttpProxyError> parse_http_proxy_request(std::string_view head);

// A whole proxy answer: "HTTP/1.1 <status> <reason>" with a text body.
std::string http_proxy_response(int status, std::string_view body);

// SOCKS5. Each parser looks at the bytes received so far: kNeedMore until a
// whole message is there, then kDone (consumed says how many bytes it took)
// or kError.
enum class ParseState { kNeedMore, kDone, kError };

struct Socks5Greeting {
  bool offers_no_auth = false;
};
ParseState parse_socks5_greeting(std::string_view buf, size_t& consumed, Socks5Greeting& out);

struct Socks5Request {
  ProxyTarget target;
  uint8_t error_reply = 0;  // kError: the reply code to send (e.g. 0x07 command not supported)
};
ParseState parse_socks5_request(std::string_view buf, size_t& consumed, Socks5Request& out);

// SOCKS5 reply codes used by the proxy.
constexpr uint8_t kSocksSucceeded = 0x00;
constexpr uint8_t kSocksGeneralFailure = 0x01;
constexpr uint8_t kSocksNotAllowed = 0x02;
constexpr uint8_t kSocksNetworkUnreachable = 0x03;
constexpr uint8_t kSocksHostUnreachable = 0x04;
constexpr uint8_t kSocksConnectionRefused = 0x05;
constexpr uint8_t kSocksTtlExpired = 0x06;
constexpr uint8_t kSocksCommandNotSupported = 0x07;
constexpr uint8_t kSocksAddressTypeNotSupported = 0x08;

// The reply to a request, with an IPv4 0.0.0.0:0 bound address (clients do
// not use it).
std::string socks5_reply(uint8_t code);

// Validates a host from a request: a host name (letters, digits, '-', '_',
// '.'; at most 253 bytes) or an address literal. Fills target.host/address.
bool parse_target_host(std::string_view host, ProxyTarget& target);

}  // namespace nsbox
