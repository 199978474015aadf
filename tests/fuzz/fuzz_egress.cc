// libFuzzer target: the egress proxy's parsers and policy checks, which see
// bytes from the sandbox. The input is read as an HTTP proxy request head
// (as found, and whole with "\r\n\r\n" appended), a SOCKS5 greeting and
// request, a cidr, an address (as text and as raw bytes), a host pattern and
// a requested host name; checked against a fixed policy. Nothing may crash or
// throw anything but std::invalid_argument where documented, and what is
// accepted must hold the invariants the proxy relies on.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "nsbox/egress_policy.h"
#include "nsbox/egress_protocol.h"

namespace {

using namespace nsbox;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                             \
    }                                                                               \
  } while (0)

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool valid_name_chars(std::string_view host) {
  for (char c : host)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// What the proxy does with a target: a name it may resolve, or an address.
void check_target(const ProxyTarget& t) {
  CHECK(!t.host.empty());
  CHECK(t.port != 0);
  if (t.address) {
    CHECK(t.host == t.address->str());
  } else {
    CHECK(t.host.size() <= 253);
    CHECK(valid_name_chars(t.host));
  }
}

// Every line ends in CRLF; no bare CR or LF, no NUL.
bool clean_crlf(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\0') return false;
    if (s[i] == '\r' && (i + 1 >= s.size() || s[i + 1] != '\n')) return false;
    if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) return false;
  }
  return true;
}

void check_http(std::string_view head) {
  auto parsed = parse_http_proxy_request(head);
  if (auto* e = std::get_if<HttpProxyError>(&parsed)) {
    CHECK(e->status == 400 || e->status == 405 || e->status == 431 || e->status == 501 || e->status == 505);
    CHECK(!e->message.empty());
    const std::string response = http_proxy_response(e->status, e->message);
    const size_t end = find_head_end(response);
    CHECK(end != 0);
    CHECK(response.find("\r\nContent-Length: " + std::to_string(response.size() - end) + "\r\n") < end);
    return;
  }
  const HttpProxyRequest& r = std::get<HttpProxyRequest>(parsed);
  CHECK(head.size() <= kMaxProxyHeadBytes);
  check_target(r.target);
  if (r.protocol == ProxyProtocol::kHttpConnect) {
    CHECK(r.upstream_head.empty());
    return;
  }
  CHECK(r.protocol == ProxyProtocol::kHttpForward);
  CHECK(!(r.chunked && r.content_length != 0));
  const std::string& up = r.upstream_head;
  const std::string_view tail = "Connection: close\r\n\r\n";
  CHECK(up.size() > tail.size() && up.compare(up.size() - tail.size(), tail.size(), tail) == 0);
  CHECK(up.find("\r\n\r\n") == up.size() - 4);  // one head: nothing smuggled after it
  CHECK(clean_crlf(up));
  // The request line: METHOD SP origin-form SP version.
  const std::string_view line = std::string_view(up).substr(0, up.find("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.rfind(' ');
  CHECK(sp1 != std::string_view::npos && sp2 > sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  CHECK(!target.empty() && target.front() == '/');
  CHECK(target.find(' ') == std::string_view::npos && target.find('#') == std::string_view::npos);
  // Hop-by-hop headers are gone; the one Connection header is the proxy's.
  const std::string l = lower(up);
  for (const char* name : {"\r\nproxy-authorization:", "\r\nproxy-connection:", "\r\nkeep-alive:", "\r\nupgrade:",
                           "\r\nte:", "\r\ntrailer:", "\r\nproxy-authenticate:"})
    CHECK(l.find(name) == std::string::npos);
  CHECK(l.find("\r\nconnection:") == l.size() - tail.size() - 2);
  // One Host header, first, naming the checked target.
  const size_t host_at = l.find("\r\nhost:");
  CHECK(host_at == line.size() && l.find("\r\nhost:", host_at + 1) == std::string::npos);
  const std::string authority = (r.target.address && r.target.address->v6 ? "[" + r.target.host + "]" : r.target.host) +
                                (r.target.port == 80 ? "" : ":" + std::to_string(r.target.port));
  CHECK(up.compare(host_at, 10 + authority.size(), "\r\nHost: " + authority + "\r\n") == 0);
}

void check_socks(std::string_view in) {
  {
    size_t consumed = 0;
    Socks5Greeting g;
    const ParseState st = parse_socks5_greeting(in, consumed, g);
    if (st == ParseState::kDone) {
      CHECK(consumed >= 3 && consumed <= in.size());
      CHECK(consumed == 2 + static_cast<uint8_t>(in[1]));
      size_t again = 0;
      Socks5Greeting g2;
      CHECK(parse_socks5_greeting(in.substr(0, consumed), again, g2) == ParseState::kDone);
      CHECK(again == consumed && g2.offers_no_auth == g.offers_no_auth);
      CHECK(parse_socks5_greeting(in.substr(0, consumed - 1), again, g2) == ParseState::kNeedMore);
    } else if (st == ParseState::kNeedMore) {
      CHECK(in.size() < 2 || in.size() < 2u + static_cast<uint8_t>(in[1]));
    }
  }
  size_t consumed = 0;
  Socks5Request r;
  const ParseState st = parse_socks5_request(in, consumed, r);
  if (st == ParseState::kDone) {
    CHECK(consumed >= 8 && consumed <= in.size());  // a one-byte name
    check_target(r.target);
    size_t again = 0;
    Socks5Request r2;
    CHECK(parse_socks5_request(in.substr(0, consumed), again, r2) == ParseState::kDone);
    CHECK(again == consumed && r2.target.host == r.target.host && r2.target.port == r.target.port);
    Socks5Request r3;
    CHECK(parse_socks5_request(in.substr(0, consumed - 1), again, r3) == ParseState::kNeedMore);
  } else if (st == ParseState::kError) {
    CHECK(r.error_reply == kSocksGeneralFailure || r.error_reply == kSocksCommandNotSupported ||
          r.error_reply == kSocksAddressTypeNotSupported);
    CHECK(socks5_reply(r.error_reply).size() == 10);
  } else {
    CHECK(r.error_reply == 0);
  }
}

const EgressPolicy& policy() {
  static const EgressPolicy p = [] {
    EgressPolicy q;
    q.allow = {
        {"api.example.com", std::nullopt, {80, 443}},
        {"*.example.org", std::nullopt, {443}},
        {"", parse_cidr("203.0.113.0/24"), {443}},
        {"", parse_cidr("10.0.0.0/8"), {8080}},
        {"", parse_cidr("2001:db8::/32"), {443}},
        {"", parse_cidr("0.0.0.0/0"), {8443}},
        {"", parse_cidr("::/0"), {8443}},
    };
    return q;
  }();
  return p;
}

// One port per input (the policy's checks are not cheap): the ports its rules
// name and one no rule names.
void check_address_verdicts(const IpAddress& address, uint16_t port) {
  const IpAddress a = canonical(address);
  CHECK(canonical(a) == a);
  const bool special = private_range(address).has_value();
  CHECK(special == private_range(a).has_value());
  const EgressPolicy& p = policy();
  static const EgressPolicy open = [] {
    EgressPolicy q = policy();
    q.deny_private = false;
    return q;
  }();
  {
    bool cidr_allows = false;
    for (const auto& rule : p.allow)
      if (rule.cidr && rule.cidr->contains(a) && rule.allows_port(port)) cidr_allows = true;
    const Verdict none = check_address(p, nullptr, address, port);
    CHECK(!none.allowed || cidr_allows);  // without a name, only a cidr rule allows
    CHECK(!none.reason.empty());
    CHECK(check_address(open, nullptr, address, port).allowed == cidr_allows);
    const Verdict named = check_address(p, &p.allow[0], address, port);
    if (!special) CHECK(named.allowed);                // a public address of an allowed name
    if (named.allowed && special) CHECK(cidr_allows);  // deny_private: only a cidr rule reaches it
    CHECK(check_address(open, &open.allow[0], address, port).allowed);
  }
}

void check_policy(std::string_view in) {
  static constexpr uint16_t kPorts[] = {443, 8080, 8443, 22};
  const uint16_t port = kPorts[in.empty() ? 0 : static_cast<uint8_t>(in.back()) % 4];
  // parse_cidr: refusals are std::invalid_argument; what parses prints back.
  try {
    const Cidr c = parse_cidr(in);
    CHECK(parse_cidr(c.str()) == c);
    CHECK(c.contains(c.base));
    CHECK(c.prefix >= 0 && c.prefix <= (c.base.v6 ? 128 : 32));
  } catch (const std::invalid_argument&) {
  }
  if (auto a = parse_ip(in)) {
    CHECK(parse_ip(a->str()) == *a);
    check_address_verdicts(*a, port);
  }
  // Raw bytes as addresses.
  if (in.size() >= 16) {
    IpAddress v6;
    v6.v6 = true;
    std::memcpy(v6.bytes.data(), in.data(), 16);
    check_address_verdicts(v6, port);
    IpAddress v4;
    std::memcpy(v4.bytes.data(), in.data(), 4);
    check_address_verdicts(v4, port);
  }
  // Host patterns.
  try {
    validate_host_pattern(in);
    CHECK(!parse_ip(in));
    if (in.substr(0, 2) == "*.") {
      const std::string_view domain = in.substr(2);
      CHECK(!host_matches(in, domain));
      CHECK(host_matches(in, "a." + std::string(domain)));
    } else {
      CHECK(host_matches(in, in));
      ProxyTarget t;
      CHECK(parse_target_host(in, t));  // a name a rule allows can be requested
      CHECK(!t.address && t.host == normalize_host(in));
    }
  } catch (const std::invalid_argument&) {
  }
  // A requested name: only resolved when a host rule allows it on the port.
  ProxyTarget t;
  if (parse_target_host(in, t) && !t.address) {
    for (uint16_t name_port : {80, 443, 8443}) {
      const Verdict v = check_name(policy(), t.host, name_port);
      bool host_allows = false;
      for (const auto& rule : policy().allow)
        if (!rule.cidr && host_matches(rule.host, t.host) && rule.allows_port(name_port)) host_allows = true;
      CHECK(v.allowed == host_allows);
      CHECK(v.allowed == (v.host_rule != nullptr));
      if (v.host_rule) CHECK(v.host_rule->allows_port(name_port) && host_matches(v.host_rule->host, t.host));
      CHECK(!v.reason.empty());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (const size_t end = find_head_end(in)) {
    CHECK(end <= in.size() && in.substr(end - 4, 4) == "\r\n\r\n");
    check_http(in.substr(0, end));
  }
  check_http(std::string(in) + "\r\n\r\n");
  check_socks(in);
  check_policy(in);
  return 0;
}
