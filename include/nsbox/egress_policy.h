// Egress policy: which destinations a sandbox's proxy may connect to. Pure
// functions over addresses and names; the proxy (egress.h) applies them to
// every request and to every address a name resolves to.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sockaddr;

namespace nsbox {

// An IPv4 or IPv6 address; IPv4 uses the first 4 bytes.
struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};

  bool operator==(const IpAddress&) const = default;
  std::string str() const;  // "203.0.113.7", "2001:db8::1"
};

// Parses a numeric address in its standard form only (inet_pton): "127.1"
// and "0x7f000001" are not addresses here. IPv6 may come in brackets.
std::optional<IpAddress> parse_ip(std::string_view text);

// The address of an AF_INET or AF_INET6 sockaddr; nullopt for other families.
std::optional<IpAddress> from_sockaddr(const sockaddr* sa);

// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address it maps:
// rules and ranges are checked against that.
IpAddress canonical(const IpAddress& address);

// 127.0.0.0/8 or ::1, in canonical form (a mapped address as IPv4).
bool is_loopback(const IpAddress& address);

struct Cidr {
  IpAddress base;
  int prefix = 0;

  bool operator==(const Cidr&) const = default;
  bool contains(const IpAddress& address) const;  // address already canonical
  std::string str() const;                        // "203.0.113.0/24"
};

// "203.0.113.0/24", "2001:db8::/32" or a bare address (a /32 or /128).
// Throws std::invalid_argument saying what is wrong (bad address, prefix out
// of range, host bits set).
Cidr parse_cidr(std::string_view text);

// The special-purpose range an address belongs to when it is not a public
// unicast address ("loopback 127.0.0.0/8", "link-local 169.254.0.0/16 (cloud
// metadata)", ...), or nullopt. IPv6 forms that embed an IPv4 address
// (mapped, NAT64, 6to4) are judged by the embedded address.
std::optional<std::string> private_range(const IpAddress& address);

struct SpecialRange {
  std::string description;  // "loopback 127.0.0.0/8"
  Cidr range;               // in the address's own form (NAT64 and 6to4 as IPv6)
};
std::optional<SpecialRange> special_range(const IpAddress& address);

struct EgressRule {
  std::string host;          // "api.example.com" or "*.example.org"; empty for a cidr rule
  std::optional<Cidr> cidr;  // set for a cidr rule
  std::vector<uint16_t> ports;

  bool operator==(const EgressRule&) const = default;
  bool allows_port(uint16_t port) const;
  std::string describe() const;  // "{host: api.example.com, ports: [443]}"
};

// The most proxy requests a profile may allow a run (each is recorded).
constexpr uint64_t kMaxEgressConnections = 4096;

struct EgressPolicy {
  std::vector<EgressRule> allow;
  bool deny_private = true;
  uint64_t max_connections = 64;     // proxy requests per run, allowed or denied; <= kMaxEgressConnections
  uint64_t max_bytes = 64ull << 20;  // bytes relayed per run, both directions

  bool operator==(const EgressPolicy&) const = default;
};

// Lower-cases a host name and drops one trailing dot.
std::string normalize_host(std::string_view host);

// Checks a host pattern of a rule: a DNS name, or "*." and a name with at
// least two labels. Throws std::invalid_argument saying what is wrong (an IP
// address belongs in a cidr rule).
void validate_host_pattern(std::string_view pattern);

// "*.example.org" matches any name below example.org, not example.org itself.
bool host_matches(std::string_view pattern, std::string_view host);

struct Verdict {
  bool allowed = false;
  std::string reason;                     // the rule that allowed, or why it was refused
  const EgressRule* host_rule = nullptr;  // for a name that may be resolved
  // Refused for the special range it is in, or as one of the host's own
  // addresses: the sandbox is told neither (which would set the host's own
  // apart from the rest of a range).
  bool range_refusal = false;
  // Refused as one of the host's own addresses, within a range a rule
  // opens: told apart from its neighbours, it would give the host's address.
  bool this_host = false;
};

// The first decision, before any DNS query: a name is only ever resolved when
// a host rule allows it on this port (so a denied name never leaks out as a
// DNS query). An address literal is decided by check_address.
Verdict check_name(const EgressPolicy& policy, std::string_view host, uint16_t port);

// The decision for one address: the name's host rule (if the request named a
// host) or a cidr rule must allow it, and deny_private refuses special ranges
// unless a cidr rule lying within the address's special range allows the
// port (127.0.0.1/32 reaches loopback; 0.0.0.0/0 does not). host_addresses
// (the host's own interfaces, which the proxy reaches through loopback) are
// special too: only a rule naming exactly one of them opens it.
Verdict check_address(const EgressPolicy& policy, const EgressRule* host_rule, const IpAddress& address, uint16_t port,
                      const std::vector<IpAddress>& host_addresses = {});

// The addresses of this host's interfaces (getifaddrs), IPv6 link-local
// included; empty if they cannot be read.
std::vector<IpAddress> host_interface_addresses();

}  // namespace nsbox
