#include "nsbox/egress_policy.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

namespace nsbox {

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

std::optional<IpAddress> parse_ip(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
    if (text.find(':') == std::string_view::npos) return std::nullopt;
  }
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  std::string s(text);
  IpAddress a;
  if (::inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) return a;
  a.v6 = true;
  if (::inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) return a;
  return std::nullopt;
}

namespace {

bool has_prefix(const IpAddress& a, std::initializer_list<uint8_t> prefix) {
  return std::equal(prefix.begin(), prefix.end(), a.bytes.begin());
}

IpAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  IpAddress out;
  out.bytes[0] = a;
  out.bytes[1] = b;
  out.bytes[2] = c;
  out.bytes[3] = d;
  return out;
}

IpAddress v4_at(const IpAddress& a, size_t offset) {
  return v4(a.bytes[offset], a.bytes[offset + 1], a.bytes[offset + 2], a.bytes[offset + 3]);
}

struct Range {
  const char* cidr;
  const char* name;
};

// IANA's special-purpose registries: nothing here is a public destination.
constexpr Range kPrivateV4[] = {
    {"0.0.0.0/8", "\"this network\""},
    {"10.0.0.0/8", "private (RFC 1918)"},
    {"100.64.0.0/10", "shared address space (CGNAT)"},
    {"127.0.0.0/8", "loopback"},
    {"169.254.0.0/16", "link-local (cloud metadata)"},
    {"172.16.0.0/12", "private (RFC 1918)"},
    {"168.63.129.16/32", "cloud platform service (Azure WireServer)"},
    {"192.0.0.0/24", "IETF protocol assignments"},
    {"192.88.99.0/24", "6to4 relay anycast (deprecated)"},
    {"192.168.0.0/16", "private (RFC 1918)"},
    {"198.18.0.0/15", "benchmarking"},
    {"224.0.0.0/4", "multicast"},
    {"240.0.0.0/4", "reserved (and broadcast)"},
};

constexpr Range kPrivateV6[] = {
    {"::/128", "unspecified"},
    {"::1/128", "loopback"},
    {"::/96", "IPv4-compatible (deprecated)"},
    {"64:ff9b:1::/48", "local-use NAT64"},
    {"100::/64", "discard-only"},
    {"2001::/32", "Teredo tunnel"},
    {"fc00::/7", "unique local (ULA)"},
    {"fe80::/10", "link-local"},
    {"fec0::/10", "site-local (deprecated)"},
    {"ff00::/8", "multicast"},
};

// The tables above, parsed once.
const std::vector<SpecialRange>& special_ranges(bool v6) {
  auto parse = [](const auto& table) {
    std::vector<SpecialRange> out;
    for (const auto& r : table) out.push_back({std::string(r.name) + " " + r.cidr, parse_cidr(r.cidr)});
    return out;
  };
  static const std::vector<SpecialRange> v4_ranges = parse(kPrivateV4);
  static const std::vector<SpecialRange> v6_ranges = parse(kPrivateV6);
  return v6 ? v6_ranges : v4_ranges;
}

std::optional<SpecialRange> find_range(const IpAddress& a) {
  for (const auto& r : special_ranges(a.v6))
    if (r.range.contains(a)) return r;
  return std::nullopt;
}

// The IPv6 range that embeds an IPv4 range at byte offset, below prefix.
SpecialRange embedded(const SpecialRange& inner, const char* what, const IpAddress& prefix_bytes, size_t offset,
                      int prefix_bits) {
  Cidr c{prefix_bytes, prefix_bits + inner.range.prefix};
  std::copy(inner.range.base.bytes.begin(), inner.range.base.bytes.begin() + 4, c.base.bytes.begin() + offset);
  return {std::string(what) + " of " + inner.description, c};
}

}  // namespace

IpAddress canonical(const IpAddress& a) {
  if (a.v6 && has_prefix(a, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})) return v4_at(a, 12);
  return a;
}

bool Cidr::contains(const IpAddress& a) const {
  if (a.v6 != base.v6) return false;
  int full = prefix / 8;
  if (!std::equal(base.bytes.begin(), base.bytes.begin() + full, a.bytes.begin())) return false;
  int rest = prefix % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (base.bytes[full] & mask) == (a.bytes[full] & mask);
}

std::string Cidr::str() const { return base.str() + "/" + std::to_string(prefix); }

Cidr parse_cidr(std::string_view text) {
  size_t slash = text.find('/');
  std::string_view addr = text.substr(0, slash);
  std::optional<IpAddress> a = addr.find('[') == std::string_view::npos ? parse_ip(addr) : std::nullopt;
  if (!a) throw std::invalid_argument("'" + std::string(addr) + "' is not an IPv4 or IPv6 address");
  const int max = a->v6 ? 128 : 32;
  Cidr c{*a, max};
  if (slash != std::string_view::npos) {
    std::string_view p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      throw std::invalid_argument("prefix length '" + std::string(p) + "' is not a number");
    c.prefix = std::stoi(std::string(p));
    if (c.prefix > max)
      throw std::invalid_argument("prefix length " + std::to_string(c.prefix) + " is out of range 0.." +
                                  std::to_string(max));
  }
  if (c.base.v6 && canonical(c.base) != c.base)
    throw std::invalid_argument(std::string(text) +
                                " is an IPv4-mapped range: write the IPv4 form (mapped addresses are checked as IPv4)");
  Cidr masked = c;
  for (int bit = c.prefix; bit < max; ++bit) masked.base.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  if (masked.base != c.base)
    throw std::invalid_argument(std::string(text) + " has host bits set; the network is " + masked.str());
  return c;
}

std::optional<SpecialRange> special_range(const IpAddress& address) {
  IpAddress a = canonical(address);
  if (a.v6 && has_prefix(a, {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) {
    if (auto inner = find_range(v4_at(a, 12))) return embedded(*inner, "NAT64", *parse_ip("64:ff9b::"), 12, 96);
    return std::nullopt;
  }
  if (a.v6 && has_prefix(a, {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0})) {  // SIIT ::ffff:0:a.b.c.d
    if (auto inner = find_range(v4_at(a, 12)))
      return embedded(*inner, "IPv4-translated", *parse_ip("::ffff:0:0.0.0.0"), 12, 96);
    return std::nullopt;
  }
  if (a.v6 && has_prefix(a, {0x20, 0x02})) {
    if (auto inner = find_range(v4_at(a, 2))) return embedded(*inner, "6to4", *parse_ip("2002::"), 2, 16);
    return std::nullopt;
  }
  return find_range(a);
}

std::optional<std::string> private_range(const IpAddress& address) {
  auto r = special_range(address);
  return r ? std::optional<std::string>(r->description) : std::nullopt;
}

bool EgressRule::allows_port(uint16_t port) const { return std::find(ports.begin(), ports.end(), port) != ports.end(); }

std::string EgressRule::describe() const {
  std::string out = cidr ? "{cidr: " + cidr->str() : "{host: " + host;
  out += ", ports: [";
  for (size_t i = 0; i < ports.size(); ++i) out += (i ? ", " : "") + std::to_string(ports[i]);
  return out + "]}";
}

std::string normalize_host(std::string_view host) {
  std::string out(host);
  if (!out.empty() && out.back() == '.') out.pop_back();
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

void validate_host_pattern(std::string_view pattern) {
  std::string_view name = pattern;
  const bool wildcard = name.substr(0, 2) == "*.";
  if (wildcard) name.remove_prefix(2);
  if (parse_ip(name))
    throw std::invalid_argument("'" + std::string(pattern) + "' is an address: write it as a cidr rule");
  if (name.empty() || name.size() > 253)
    throw std::invalid_argument("'" + std::string(pattern) + "' is not a host name");
  size_t labels = 0;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    const bool ok = !label.empty() && label.size() <= 63 && label.front() != '-' && label.back() != '-' &&
                    std::all_of(label.begin(), label.end(),
                                [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_'; });
    if (!ok) {
      throw std::invalid_argument("'" + std::string(pattern) + "' is not a host name" +
                                  (label.find('*') != std::string_view::npos
                                       ? " (a wildcard is only allowed as a whole first label: *.example.org)"
                                       : ""));
    }
    ++labels;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  const std::string_view last = name.substr(name.rfind('.') + 1);
  if (std::all_of(last.begin(), last.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw std::invalid_argument("'" + std::string(pattern) + "' looks like an address: write it as a cidr rule");
  if (wildcard && labels < 2)
    throw std::invalid_argument("'" + std::string(pattern) + "' would match a whole top-level domain");
}

bool host_matches(std::string_view pattern, std::string_view host) {
  if (pattern.substr(0, 2) == "*.") {
    std::string_view suffix = pattern.substr(1);  // ".example.org"
    return host.size() > suffix.size() && host.substr(host.size() - suffix.size()) == suffix;
  }
  return pattern == host;
}

Verdict check_name(const EgressPolicy& policy, std::string_view host, uint16_t port) {
  const EgressRule* other_port = nullptr;
  for (const auto& rule : policy.allow) {
    if (rule.cidr || !host_matches(rule.host, host)) continue;
    if (rule.allows_port(port)) return {true, "rule " + rule.describe(), &rule};
    if (!other_port) other_port = &rule;
  }
  std::string target = std::string(host) + ":" + std::to_string(port);
  if (other_port) return {false, "port " + std::to_string(port) + " is not in rule " + other_port->describe(), nullptr};
  return {false, "no rule allows " + target + " (only host rules allow names; the name was not resolved)", nullptr};
}

bool is_loopback(const IpAddress& a) {
  if (!a.v6) return a.bytes[0] == 127;
  return std::all_of(a.bytes.begin(), a.bytes.end() - 1, [](uint8_t b) { return b == 0; }) && a.bytes[15] == 1;
}

Verdict check_address(const EgressPolicy& policy, const EgressRule* host_rule, const IpAddress& address, uint16_t port,
                      const std::vector<IpAddress>& host_addresses) {
  const IpAddress a = canonical(address);
  // The host's own addresses first: one in a private range (a cloud host's
  // 10.x) must not open to a rule for that range, which means other
  // machines, since the proxy would reach the host's own services bound to
  // 0.0.0.0 through it. Loopback is this host whatever the address, so a
  // rule within loopback says so already.
  const bool of_this_host =
      !is_loopback(a) && std::find(host_addresses.begin(), host_addresses.end(), a) != host_addresses.end();
  std::optional<SpecialRange> special =
      of_this_host ? SpecialRange{"an address of this host", Cidr{a, a.v6 ? 128 : 32}} : special_range(a);
  const EgressRule* cidr_rule = nullptr;
  const EgressRule* other_port = nullptr;
  for (const auto& rule : policy.allow) {
    if (!rule.cidr || !rule.cidr->contains(a)) continue;
    if (rule.allows_port(port)) {
      // Under deny_private a special range is only reached through a rule
      // inside it: 0.0.0.0/0 means "the Internet", not 169.254.169.254.
      const bool names_it = !special || !policy.deny_private ||
                            (rule.cidr->prefix >= special->range.prefix && special->range.contains(rule.cidr->base));
      if (names_it) {
        cidr_rule = &rule;
        break;
      }
      continue;
    }
    if (!other_port) other_port = &rule;
  }
  const bool private_refused = policy.deny_private && special && !cidr_rule;
  const std::string private_reason =
      special ? a.str() + " is " + special->description + ", refused by deny_private (only a cidr rule " +
                    (of_this_host ? "naming exactly that address" : "within that range") + " allows it)"
              : "";
  if (!host_rule && !cidr_rule) {
    for (const auto& rule : policy.allow)
      if (private_refused && rule.cidr && rule.cidr->contains(a) && rule.allows_port(port))
        return {false, private_reason, nullptr, true, of_this_host};  // a broader rule would have allowed it
    if (other_port)
      return {false, "port " + std::to_string(port) + " is not in rule " + other_port->describe(), nullptr};
    return {false, "no rule allows " + a.str() + " port " + std::to_string(port), nullptr};
  }
  if (private_refused) return {false, private_reason, nullptr, true, of_this_host};
  return {true, "rule " + (cidr_rule ? cidr_rule : host_rule)->describe(), host_rule};
}

std::optional<IpAddress> from_sockaddr(const sockaddr* sa) {
  IpAddress a;
  if (sa->sa_family == AF_INET) {
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    a.v6 = true;
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
  } else {
    return std::nullopt;
  }
  return a;
}

std::vector<IpAddress> host_interface_addresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const std::optional<IpAddress> a = from_sockaddr(i->ifa_addr);
    if (a && std::find(out.begin(), out.end(), *a) == out.end()) out.push_back(*a);
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace nsbox
