// An HTTP/1.1 request head parsed strictly, for refusing a request on its
// head before a request thread reads any of its body.
//
// cpp-httplib 0.11 parses heads leniently (a bare LF, a space before a
// header's colon, a NUL in a value); the node's arrival watch parses each
// head with these rules first and refuses one they do not accept, so that
// what the node decides on a head is what cpp-httplib then serves.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nsbox {

// The longest header line accepted, its CRLF included (cpp-httplib's bound).
constexpr size_t kMaxHeaderLine = 8192;

struct RequestHead {
  std::string method;
  std::string target;                                        // as sent: path, then '?' and a query if any
  std::string version;                                       // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // in order, values without surrounding blanks
};

// Parses head, the request line and headers up to and including the empty
// line that ends them. The head, or an error naming what is wrong with it
// (empty on success).
std::string parse_request_head(std::string_view head, RequestHead& out);

}  // namespace nsbox
