#include "nsbox/egress_protocol.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

namespace nsbox {

const char* to_string(ProxyProtocol protocol) {
  switch (protocol) {
    case ProxyProtocol::kHttpConnect:
      return "http-connect";
    case ProxyProtocol::kHttpForward:
      return "http";
    case ProxyProtocol::kSocks5:
      return "socks5";
  }
  return "?";
}

namespace {

bool is_tchar(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return is_tchar(c); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  unsigned long v = std::stoul(std::string(s));
  if (v == 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

// "host:port", "[v6]:port"; with default_port, the port may be omitted.
bool parse_authority(std::string_view s, std::optional<uint16_t> default_port, ProxyTarget& out) {
  std::string_view host;
  std::string_view rest;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    host = s.substr(0, close + 1);
    rest = s.substr(close + 1);
  } else {
    size_t colon = s.rfind(':');
    host = s.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : s.substr(colon);
    if (host.find(':') != std::string_view::npos) return false;  // IPv6 needs brackets
  }
  if (rest.empty()) {
    if (!default_port) return false;
    out.port = *default_port;
  } else {
    if (rest.front() != ':') return false;
    auto port = parse_port(rest.substr(1));
    if (!port) return false;
    out.port = *port;
  }
  return parse_target_host(host, out);
}

struct Header {
  std::string_view name;
  std::string_view value;
};

// Headers that describe one hop, never forwarded.
const std::set<std::string> kHopByHop = {
    "connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
    "te",         "trailer",          "upgrade"};

HttpProxyError error(int status, std::string message) { return {status, std::move(message)}; }

// Splits "METHOD TARGET VERSION\r\nheaders...\r\n\r\n" into lines; false on a
// bare CR or LF, a NUL, or obsolete line folding.
bool split_lines(std::string_view head, std::vector<std::string_view>& lines) {
  head.remove_suffix(4);  // the final "\r\n\r\n"
  size_t start = 0;
  for (;;) {
    size_t end = head.find("\r\n", start);
    std::string_view line = head.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) return false;
    if (!lines.empty() && !line.empty() && (line.front() == ' ' || line.front() == '\t')) return false;
    lines.push_back(line);
    if (end == std::string_view::npos) return true;
    start = end + 2;
  }
}

}  // namespace

bool parse_target_host(std::string_view host, ProxyTarget& target) {
  if (auto a = parse_ip(host)) {
    target.address = *a;
    target.host = a->str();
    return true;
  }
  std::string name = normalize_host(host);
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.find("..") != std::string::npos) return false;
  if (!std::all_of(name.begin(), name.end(),
                   [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; }))
    return false;
  target.address.reset();
  target.host = std::move(name);
  return true;
}

size_t find_head_end(std::string_view buf) {
  size_t pos = buf.find("\r\n\r\n");
  return pos == std::string_view::npos ? 0 : pos + 4;
}

std::variant<HttpProxyRequest, HttpProxyError> parse_http_proxy_request(std::string_view head) {
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return error(400, "incomplete request head");
  if (head.size() > kMaxProxyHeadBytes) return error(431, "request head larger than 16 KiB");
  std::vector<std::string_view> lines;
  if (!split_lines(head, lines)) return error(400, "malformed request head (bare CR/LF, NUL or folded header)");

  std::string_view line = lines[0];
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return error(400, "malformed request line");
  std::string_view method = line.substr(0, sp1);
  std::string_view uri = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || uri.empty()) return error(400, "malformed request line");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return error(505, "only HTTP/1.0 and HTTP/1.1 are spoken");

  std::vector<Header> headers;
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == std::string_view::npos || !is_token(lines[i].substr(0, colon)))
      return error(400, "malformed header line");
    headers.push_back({lines[i].substr(0, colon), trim(lines[i].substr(colon + 1))});
  }

  HttpProxyRequest req;
  if (method == "CONNECT") {
    if (!parse_authority(uri, std::nullopt, req.target))
      return error(400, "CONNECT needs host:port, got '" + std::string(uri.substr(0, 200)) + "'");
    req.protocol = ProxyProtocol::kHttpConnect;
    return req;
  }

  std::string scheme = lower(uri.substr(0, std::min<size_t>(uri.find("://"), 8)));
  if (uri.find("://") == std::string_view::npos) {
    return error(400, "this is a proxy: send an absolute URI (GET http://host/path) or CONNECT host:port");
  }
  if (scheme != "http") {
    return error(400, "the proxy forwards http:// URIs; use CONNECT for " + scheme.substr(0, 20) + "://");
  }
  std::string_view rest = uri.substr(7);
  size_t path_start = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_start);
  if (authority.find('@') != std::string_view::npos) return error(400, "credentials in the URI are not forwarded");
  if (!parse_authority(authority, 80, req.target))
    return error(400, "bad host in '" + std::string(uri.substr(0, 200)) + "'");
  std::string path = path_start == std::string_view::npos ? "/" : std::string(rest.substr(path_start));
  if (size_t hash = path.find('#'); hash != std::string::npos) path.resize(hash);
  if (path.empty() || path.front() == '?') path.insert(path.begin(), '/');

  std::set<std::string> dropped = kHopByHop;
  bool has_host = false;
  std::optional<uint64_t> content_length;
  std::optional<std::string> transfer_encoding;
  for (const auto& h : headers) {
    std::string name = lower(h.name);
    if (name == "connection" || name == "proxy-connection") {
      std::string_view v = h.value;
      while (!v.empty()) {
        size_t comma = v.find(',');
        std::string named = lower(trim(v.substr(0, comma)));
        // The body's framing is the proxy's to keep: dropping it would let
        // one recorded request carry another.
        if (named != "content-length" && named != "transfer-encoding") dropped.insert(named);
        v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
      }
    } else if (name == "content-length") {
      auto& v = h.value;
      if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return error(400, "bad Content-Length");
      uint64_t n = std::stoull(std::string(v));
      if (content_length && *content_length != n) return error(400, "conflicting Content-Length headers");
      content_length = n;
    } else if (name == "transfer-encoding") {
      transfer_encoding = transfer_encoding ? *transfer_encoding + "," + lower(h.value) : lower(h.value);
    } else if (name == "host") {
      if (has_host) return error(400, "more than one Host header");
      has_host = true;
    }
  }
  if (transfer_encoding) {
    if (content_length) return error(400, "both Content-Length and Transfer-Encoding");
    std::string te = *transfer_encoding;
    size_t last = te.rfind(',');
    if (std::string(trim(last == std::string::npos ? te : std::string_view(te).substr(last + 1))) != "chunked")
      return error(501, "Transfer-Encoding other than chunked");
    req.chunked = true;
  }
  req.content_length = content_length.value_or(0);
  req.protocol = ProxyProtocol::kHttpForward;

  std::string& out = req.upstream_head;
  out.reserve(head.size() + 64);
  out.append(method).append(" ").append(path).append(" ").append(version).append("\r\n");
  // Host is the URI's authority, whatever the client wrote (RFC 9112 3.2.2):
  // the upstream serves the host that was checked.
  std::string host = req.target.address && req.target.address->v6 ? "[" + req.target.host + "]" : req.target.host;
  out.append("Host: ").append(host);
  if (req.target.port != 80) out.append(":").append(std::to_string(req.target.port));
  out.append("\r\n");
  for (const auto& h : headers) {
    if (dropped.count(lower(h.name)) || lower(h.name) == "host") continue;
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("Connection: close\r\n\r\n");
  return req;
}

std::string http_proxy_response(int status, std::string_view body) {
  const char* reason = "Error";
  switch (status) {
    case 200:
      reason = "Connection established";
      break;
    case 400:
      reason = "Bad Request";
      break;
    case 403:
      reason = "Forbidden";
      break;
    case 405:
      reason = "Method Not Allowed";
      break;
    case 408:
      reason = "Request Timeout";
      break;
    case 431:
      reason = "Request Header Fields Too Large";
      break;
    case 501:
      reason = "Not Implemented";
      break;
    case 502:
      reason = "Bad Gateway";
      break;
    case 504:
      reason = "Gateway Timeout";
      break;
    case 505:
      reason = "HTTP Version Not Supported";
      break;
  }
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  if (status == 200) return out + "\r\n";
  out +=
      "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n";
  return out.append(body);
}

ParseState parse_socks5_greeting(std::string_view buf, size_t& consumed, Socks5Greeting& out) {
  if (buf.empty()) return ParseState::kNeedMore;
  if (static_cast<uint8_t>(buf[0]) != 5) return ParseState::kError;
  if (buf.size() < 2) return ParseState::kNeedMore;
  size_t n = static_cast<uint8_t>(buf[1]);
  if (n == 0) return ParseState::kError;
  if (buf.size() < 2 + n) return ParseState::kNeedMore;
  out.offers_no_auth = buf.substr(2, n).find('\0') != std::string_view::npos;
  consumed = 2 + n;
  return ParseState::kDone;
}

ParseState parse_socks5_request(std::string_view buf, size_t& consumed, Socks5Request& out) {
  auto fail = [&](uint8_t code) {
    out.error_reply = code;
    return ParseState::kError;
  };
  if (buf.size() < 4) return ParseState::kNeedMore;
  if (static_cast<uint8_t>(buf[0]) != 5 || buf[2] != 0) return fail(kSocksGeneralFailure);
  if (buf[1] != 1) return fail(kSocksCommandNotSupported);  // BIND and UDP ASSOCIATE are not offered
  const uint8_t atyp = static_cast<uint8_t>(buf[3]);
  size_t addr_len = 0;
  size_t offset = 4;
  if (atyp == 1) {
    addr_len = 4;
  } else if (atyp == 4) {
    addr_len = 16;
  } else if (atyp == 3) {
    if (buf.size() < 5) return ParseState::kNeedMore;
    addr_len = static_cast<uint8_t>(buf[4]);
    offset = 5;
    if (addr_len == 0) return fail(kSocksGeneralFailure);
  } else {
    return fail(kSocksAddressTypeNotSupported);
  }
  if (buf.size() < offset + addr_len + 2) return ParseState::kNeedMore;
  std::string_view addr = buf.substr(offset, addr_len);
  if (atyp == 3) {
    if (!parse_target_host(addr, out.target)) return fail(kSocksGeneralFailure);
  } else {
    IpAddress a;
    a.v6 = atyp == 4;
    std::copy(addr.begin(), addr.end(), a.bytes.begin());
    out.target.address = a;
    out.target.host = a.str();
  }
  out.target.port = static_cast<uint16_t>(static_cast<uint8_t>(buf[offset + addr_len]) << 8 |
                                          static_cast<uint8_t>(buf[offset + addr_len + 1]));
  if (out.target.port == 0) return fail(kSocksGeneralFailure);
  consumed = offset + addr_len + 2;
  return ParseState::kDone;
}

std::string socks5_reply(uint8_t code) {
  return std::string({'\x05', static_cast<char>(code), '\0', '\x01', '\0', '\0', '\0', '\0', '\0', '\0'});
}

}  // namespace nsbox
