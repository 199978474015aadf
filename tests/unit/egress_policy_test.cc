// The egress policy's pure parts: addresses, ranges, host patterns and the
// verdicts the proxy applies to every request. No sockets.
#include "nsbox/egress_policy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nsbox {
namespace {

IpAddress ip(const std::string& text) {
  auto a = parse_ip(text);
  if (!a) throw std::invalid_argument("test address '" + text + "' does not parse");
  return *a;
}

std::string cidr_error(const std::string& text) {
  try {
    Cidr c = parse_cidr(text);
    return "(parsed as " + c.str() + ")";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

std::string pattern_error(const std::string& pattern) {
  try {
    validate_host_pattern(pattern);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(valid)";
}

EgressRule host_rule(const std::string& host, std::vector<uint16_t> ports) { return {host, std::nullopt, ports}; }
EgressRule cidr_rule(const std::string& cidr, std::vector<uint16_t> ports) { return {"", parse_cidr(cidr), ports}; }

// ---- parse_ip / canonical ----

TEST(EgressPolicy, ParseIpAcceptsStandardForms) {
  auto a = parse_ip("203.0.113.7");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->v6);
  EXPECT_EQ(a->bytes[0], 203);
  EXPECT_EQ(a->bytes[3], 7);
  EXPECT_EQ(a->str(), "203.0.113.7");

  auto b = parse_ip("2001:DB8::1");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->v6);
  EXPECT_EQ(b->bytes[0], 0x20);
  EXPECT_EQ(b->bytes[15], 1);
  EXPECT_EQ(b->str(), "2001:db8::1");

  auto bracketed = parse_ip("[2001:db8::1]");
  ASSERT_TRUE(bracketed);
  EXPECT_EQ(*bracketed, *b);
  EXPECT_EQ(parse_ip("::")->str(), "::");
  EXPECT_EQ(parse_ip("::ffff:10.1.2.3")->str(), "::ffff:10.1.2.3");
}

TEST(EgressPolicy, ParseIpRejectsNonStandardForms) {
  for (const char* text :
       {"127.1", "0x7f000001", "2130706433", "1.2.3.4.5", "1.2.3", "256.1.1.1", "1.2.3.-4", " 1.2.3.4", "1.2.3.4 ",
        "[127.0.0.1]", "[::1", "::1]", "[]", "", "fe80::1%lo", "::1::2", "example.com", "1.2.3.4/32"}) {
    EXPECT_FALSE(parse_ip(text)) << text;
  }
}

TEST(EgressPolicy, CanonicalUnwrapsIpv4Mapped) {
  IpAddress mapped = ip("::ffff:10.1.2.3");
  ASSERT_TRUE(mapped.v6);
  IpAddress c = canonical(mapped);
  EXPECT_FALSE(c.v6);
  EXPECT_EQ(c, ip("10.1.2.3"));
  EXPECT_EQ(canonical(ip("10.1.2.3")), ip("10.1.2.3"));
  EXPECT_EQ(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
  EXPECT_TRUE(canonical(ip("::10.1.2.3")).v6) << "IPv4-compatible is not IPv4-mapped";
  EXPECT_TRUE(canonical(ip("64:ff9b::a01:203")).v6) << "NAT64 is judged by private_range, not unwrapped";
}

// ---- parse_cidr ----

TEST(EgressPolicy, ParseCidrGoodNetworks) {
  Cidr v4 = parse_cidr("203.0.113.0/24");
  EXPECT_EQ(v4.base, ip("203.0.113.0"));
  EXPECT_EQ(v4.prefix, 24);
  EXPECT_EQ(v4.str(), "203.0.113.0/24");
  EXPECT_TRUE(v4.contains(ip("203.0.113.255")));
  EXPECT_FALSE(v4.contains(ip("203.0.114.0")));
  EXPECT_FALSE(v4.contains(ip("::ffff:203.0.113.1"))) << "contains() takes canonical addresses";

  Cidr v6 = parse_cidr("2001:db8::/32");
  EXPECT_EQ(v6.prefix, 32);
  EXPECT_EQ(v6.str(), "2001:db8::/32");
  EXPECT_TRUE(v6.contains(ip("2001:db8:ffff::1")));
  EXPECT_FALSE(v6.contains(ip("2001:db9::1")));
  EXPECT_FALSE(v6.contains(ip("32.1.13.184"))) << "families never mix";

  EXPECT_EQ(parse_cidr("10.1.2.3").prefix, 32);
  EXPECT_EQ(parse_cidr("::1").prefix, 128);
  EXPECT_EQ(parse_cidr("0.0.0.0/0").prefix, 0);
  EXPECT_TRUE(parse_cidr("0.0.0.0/0").contains(ip("255.255.255.255")));
  EXPECT_TRUE(parse_cidr("::/0").contains(ip("ff02::1")));

  // A prefix that is not a multiple of 8.
  Cidr cgnat = parse_cidr("100.64.0.0/10");
  EXPECT_TRUE(cgnat.contains(ip("100.127.255.255")));
  EXPECT_FALSE(cgnat.contains(ip("100.128.0.0")));
  EXPECT_FALSE(cgnat.contains(ip("100.63.255.255")));
}

TEST(EgressPolicy, ParseCidrHostBitsSetNamesTheNetwork) {
  std::string e = cidr_error("10.1.2.3/8");
  EXPECT_NE(e.find("host bits set"), std::string::npos) << e;
  EXPECT_NE(e.find("10.0.0.0/8"), std::string::npos) << e;

  e = cidr_error("2001:db8::1/32");
  EXPECT_NE(e.find("host bits set"), std::string::npos) << e;
  EXPECT_NE(e.find("2001:db8::/32"), std::string::npos) << e;

  e = cidr_error("100.127.0.0/9");
  EXPECT_NE(e.find("100.0.0.0/9"), std::string::npos) << e;
}

TEST(EgressPolicy, ParseCidrPrefixOutOfRange) {
  std::string e = cidr_error("10.0.0.0/33");
  EXPECT_NE(e.find("out of range 0..32"), std::string::npos) << e;
  e = cidr_error("::/129");
  EXPECT_NE(e.find("out of range 0..128"), std::string::npos) << e;
  for (const char* text : {"10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/8x", "10.0.0.0/1000"}) {
    e = cidr_error(text);
    EXPECT_NE(e.find("prefix length"), std::string::npos) << text << ": " << e;
  }
}

TEST(EgressPolicy, ParseCidrGarbage) {
  for (const char* text :
       {"", "/8", "example.com/24", "10.0.0/8", "127.1/32", "[::1]/128", "[::1]", "10.0.0.0/8/8", "0x0a000000/8"}) {
    std::string e = cidr_error(text);
    EXPECT_EQ(e.find("(parsed"), std::string::npos) << text << " parsed: " << e;
  }
  EXPECT_NE(cidr_error("example.com/24").find("not an IPv4 or IPv6 address"), std::string::npos);
}

// ---- private_range ----

TEST(EgressPolicy, PrivateRangeIpv4) {
  struct Case {
    const char* address;
    const char* range;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"0.0.0.0", "0.0.0.0/8"},
           {"0.255.255.255", "0.0.0.0/8"},
           {"10.0.0.1", "10.0.0.0/8"},
           {"10.255.255.255", "10.0.0.0/8"},
           {"100.64.0.1", "100.64.0.0/10"},
           {"100.127.255.254", "100.64.0.0/10"},
           {"127.0.0.1", "127.0.0.0/8"},
           {"127.255.255.254", "127.0.0.0/8"},
           {"169.254.169.254", "169.254.0.0/16"},
           {"172.16.0.1", "172.16.0.0/12"},
           {"172.31.255.255", "172.16.0.0/12"},
           {"192.0.0.8", "192.0.0.0/24"},
           {"192.168.1.1", "192.168.0.0/16"},
           {"198.18.0.1", "198.18.0.0/15"},
           {"198.19.255.255", "198.18.0.0/15"},
           {"224.0.0.1", "224.0.0.0/4"},
           {"239.255.255.250", "224.0.0.0/4"},
           {"240.0.0.1", "240.0.0.0/4"},
           {"255.255.255.255", "240.0.0.0/4"},
       }) {
    auto r = private_range(ip(c.address));
    ASSERT_TRUE(r) << c.address;
    EXPECT_NE(r->find(c.range), std::string::npos) << c.address << ": " << *r;
  }
  EXPECT_EQ(*private_range(ip("169.254.169.254")), "link-local (cloud metadata) 169.254.0.0/16");
  EXPECT_EQ(*private_range(ip("127.0.0.1")), "loopback 127.0.0.0/8");
  EXPECT_NE(private_range(ip("100.64.0.1"))->find("CGNAT"), std::string::npos);
}

TEST(EgressPolicy, PrivateRangeIpv6) {
  struct Case {
    const char* address;
    const char* expected;  // a substring of the answer
  };
  for (const Case& c : std::initializer_list<Case>{
           {"::1", "loopback ::1/128"},
           {"::", "unspecified ::/128"},
           {"::7f00:1", "IPv4-compatible"},
           {"64:ff9b:1::1", "local-use NAT64"},
           {"100::1", "discard-only"},
           {"2001::1", "Teredo"},
           {"fe80::1", "link-local fe80::/10"},
           {"febf::1", "link-local fe80::/10"},
           {"fc00::1", "unique local (ULA) fc00::/7"},
           {"fd00::1", "unique local (ULA) fc00::/7"},
           {"fec0::1", "site-local"},
           {"feff::1", "site-local"},
           {"ff02::1", "multicast ff00::/8"},
           // Forms that embed an IPv4 address are judged by it.
           {"::ffff:10.1.2.3", "private (RFC 1918) 10.0.0.0/8"},
           {"::ffff:127.0.0.1", "loopback 127.0.0.0/8"},
           {"64:ff9b::a9fe:a9fe", "NAT64 of link-local (cloud metadata) 169.254.0.0/16"},
           {"64:ff9b::7f00:1", "NAT64 of loopback"},
           {"2002:7f00:1::", "6to4 of loopback 127.0.0.0/8"},
           {"2002:a9fe:a9fe::1", "6to4 of link-local (cloud metadata)"},
       }) {
    auto r = private_range(ip(c.address));
    ASSERT_TRUE(r) << c.address;
    EXPECT_NE(r->find(c.expected), std::string::npos) << c.address << ": " << *r;
  }
}

TEST(EgressPolicy, PublicAddressesAreNotPrivate) {
  // clang-format off
  for (const char* a : {"203.0.113.7", "198.51.100.1", "192.0.2.1", "8.8.8.8", "1.1.1.1", "172.15.255.255",
                        "172.32.0.0", "100.63.255.255", "100.128.0.0", "198.17.255.255", "198.20.0.0", "192.0.1.255",
                        "192.169.0.0", "223.255.255.255", "11.0.0.0", "126.255.255.255", "128.0.0.0",
                        "2001:db8::1", "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:203.0.113.7",
                        "64:ff9b::808:808", "2002:808:808::1", "fbff::1", "fe7f::1"}) {
    // clang-format on
    auto r = private_range(ip(a));
    EXPECT_FALSE(r) << a << " is " << r.value_or("");
  }
}

// ---- host patterns ----

TEST(EgressPolicy, ValidHostPatterns) {
  for (const char* p : {"api.example.com", "localhost", "*.example.org", "*.a.b.example.org", "a_b.example.com",
                        "xn--bcher-kva.example", "a-b.c-d.example", "123.example.com", "example.c0m", "EXAMPLE.COM"}) {
    EXPECT_EQ(pattern_error(p), "(valid)") << p;
  }
  EXPECT_EQ(pattern_error(std::string(63, 'a') + ".example.com"), "(valid)");
}

TEST(EgressPolicy, InvalidHostPatterns) {
  struct Case {
    std::string pattern;
    const char* expected;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"10.0.0.1", "is an address: write it as a cidr rule"},
           {"::1", "is an address"},
           {"[2001:db8::1]", "is an address"},
           {"*.10.0.0.1", "is an address"},
           {"example.123", "looks like an address"},
           {"127.1", "looks like an address"},
           {"1.2.3.4.5", "looks like an address"},
           {"*.com", "would match a whole top-level domain"},
           {"a*.example.org", "a wildcard is only allowed as a whole first label"},
           {"*.*.example.org", "a wildcard is only allowed as a whole first label"},
           {"api.*.example.org", "a wildcard is only allowed as a whole first label"},
           {"*", "a wildcard is only allowed"},
           {"a..example.org", "is not a host name"},
           {".example.org", "is not a host name"},
           {"example.org.", "is not a host name"},
           {"", "is not a host name"},
           {"*.", "is not a host name"},
           {"-a.example.org", "is not a host name"},
           {"a-.example.org", "is not a host name"},
           {"exa mple.org", "is not a host name"},
           {"example.org:443", "is not a host name"},
           {std::string(64, 'a') + ".example.com", "is not a host name"},
           {std::string(250, 'a').replace(10, 1, ".").replace(70, 1, ".").replace(130, 1, ".").replace(190, 1, ".") +
                ".toolong",
            "is not a host name"},
       }) {
    std::string e = pattern_error(c.pattern);
    EXPECT_NE(e.find(c.expected), std::string::npos) << "'" << c.pattern << "': " << e;
  }
}

TEST(EgressPolicy, HostMatches) {
  EXPECT_TRUE(host_matches("api.example.com", "api.example.com"));
  EXPECT_FALSE(host_matches("api.example.com", "x.api.example.com"));
  EXPECT_FALSE(host_matches("api.example.com", "example.com"));
  EXPECT_TRUE(host_matches("*.example.org", "a.example.org"));
  EXPECT_TRUE(host_matches("*.example.org", "a.b.example.org"));
  EXPECT_FALSE(host_matches("*.example.org", "example.org")) << "not the domain itself";
  EXPECT_FALSE(host_matches("*.example.org", "badexample.org")) << "a label boundary is needed";
  EXPECT_FALSE(host_matches("*.example.org", ".example.org"));
  EXPECT_FALSE(host_matches("*.example.org", "a.example.org.evil.com"));
  EXPECT_FALSE(host_matches("*.example.org", ""));
}

TEST(EgressPolicy, NormalizeHost) {
  EXPECT_EQ(normalize_host("API.Example.COM."), "api.example.com");
  EXPECT_EQ(normalize_host("localhost"), "localhost");
  EXPECT_EQ(normalize_host("a.."), "a.") << "one trailing dot only";
}

// ---- verdicts ----

TEST(EgressPolicy, RuleDescribe) {
  EXPECT_EQ(host_rule("api.example.com", {443, 8443}).describe(), "{host: api.example.com, ports: [443, 8443]}");
  EXPECT_EQ(cidr_rule("203.0.113.0/24", {80}).describe(), "{cidr: 203.0.113.0/24, ports: [80]}");
  EXPECT_TRUE(host_rule("a.example", {80, 443}).allows_port(443));
  EXPECT_FALSE(host_rule("a.example", {80, 443}).allows_port(8080));
}

TEST(EgressPolicy, CheckNameHostRuleHit) {
  EgressPolicy p;
  p.allow = {cidr_rule("203.0.113.0/24", {443}), host_rule("api.example.com", {443}),
             host_rule("*.example.org", {80, 443})};
  Verdict v = check_name(p, "api.example.com", 443);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.host_rule, &p.allow[1]);
  EXPECT_EQ(v.reason, "rule {host: api.example.com, ports: [443]}");

  v = check_name(p, "cdn.example.org", 80);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.host_rule, &p.allow[2]);
}

TEST(EgressPolicy, CheckNameLaterRuleWithThePortWins) {
  EgressPolicy p;
  p.allow = {host_rule("api.example.com", {443}), host_rule("*.example.com", {8080})};
  Verdict v = check_name(p, "api.example.com", 8080);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.host_rule, &p.allow[1]);
}

TEST(EgressPolicy, CheckNameWrongPortNamesTheRule) {
  EgressPolicy p;
  p.allow = {host_rule("api.example.com", {443})};
  Verdict v = check_name(p, "api.example.com", 80);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.host_rule, nullptr);
  EXPECT_EQ(v.reason, "port 80 is not in rule {host: api.example.com, ports: [443]}");
}

TEST(EgressPolicy, CheckNameUnmatchedIsNotResolved) {
  EgressPolicy p;
  p.allow = {host_rule("api.example.com", {443}), cidr_rule("0.0.0.0/0", {443})};
  Verdict v = check_name(p, "evil.example.net", 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.host_rule, nullptr);
  EXPECT_NE(v.reason.find("evil.example.net:443"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("not resolved"), std::string::npos) << v.reason;
  // A cidr rule never allows a name, not even one that is all of IPv4.
  EXPECT_FALSE(check_name(p, "example.org", 443).allowed);
}

TEST(EgressPolicy, CheckAddressCidrRule) {
  EgressPolicy p;
  p.allow = {cidr_rule("203.0.113.0/24", {443}), cidr_rule("2001:db8::/32", {80})};
  Verdict v = check_address(p, nullptr, ip("203.0.113.7"), 443);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.reason, "rule {cidr: 203.0.113.0/24, ports: [443]}");
  EXPECT_TRUE(check_address(p, nullptr, ip("2001:db8::1"), 80).allowed);

  v = check_address(p, nullptr, ip("203.0.113.7"), 80);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "port 80 is not in rule {cidr: 203.0.113.0/24, ports: [443]}");

  v = check_address(p, nullptr, ip("198.51.100.1"), 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "no rule allows 198.51.100.1 port 443");
}

TEST(EgressPolicy, CheckAddressHostRuleRefusesPrivateAddresses) {
  // DNS rebinding: an allowed name resolving to a private address.
  EgressPolicy p;
  p.allow = {host_rule("api.example.com", {443})};
  const EgressRule* rule = &p.allow[0];
  Verdict v = check_address(p, rule, ip("203.0.113.7"), 443);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.host_rule, rule);
  EXPECT_EQ(v.reason, "rule {host: api.example.com, ports: [443]}");

  for (const char* a : {"127.0.0.1", "169.254.169.254", "10.0.0.5", "::1", "fd00::1", "64:ff9b::a9fe:a9fe"}) {
    v = check_address(p, rule, ip(a), 443);
    EXPECT_FALSE(v.allowed) << a;
    EXPECT_NE(v.reason.find("refused by deny_private"), std::string::npos) << a << ": " << v.reason;
  }
  v = check_address(p, rule, ip("169.254.169.254"), 443);
  EXPECT_EQ(v.reason.rfind("169.254.169.254 is link-local (cloud metadata) 169.254.0.0/16, refused by deny_private", 0),
            0u)
      << v.reason;
}

TEST(EgressPolicy, CheckAddressOnlyACidrRuleWithinTheRangeOverridesDenyPrivate) {
  // 0.0.0.0/0 means "the Internet": not the metadata service, not loopback.
  EgressPolicy p;
  p.allow = {cidr_rule("0.0.0.0/0", {443}),         cidr_rule("::/0", {443}),
             cidr_rule("126.0.0.0/7", {80}),        cidr_rule("127.0.0.0/8", {8080}),
             cidr_rule("169.254.169.254/32", {80}), cidr_rule("64:ff9b::/96", {443})};
  EXPECT_TRUE(check_address(p, nullptr, ip("203.0.113.7"), 443).allowed);
  EXPECT_TRUE(check_address(p, nullptr, ip("2001:db8::1"), 443).allowed);
  for (const char* a : {"169.254.169.254", "127.0.0.1", "10.0.0.1", "::ffff:169.254.169.254", "::1", "fd00::1",
                        "64:ff9b::a9fe:a9fe", "2002:7f00:1::"}) {
    Verdict v = check_address(p, nullptr, ip(a), 443);
    EXPECT_FALSE(v.allowed) << a << " through a catch-all rule";
    EXPECT_NE(v.reason.find("refused by deny_private"), std::string::npos) << a << ": " << v.reason;
  }
  EXPECT_TRUE(check_address(p, nullptr, ip("64:ff9b::808:808"), 443).allowed) << "NAT64 of a public address";
  // A rule broader than the special range does not name it either.
  EXPECT_TRUE(check_address(p, nullptr, ip("126.1.2.3"), 80).allowed);
  EXPECT_FALSE(check_address(p, nullptr, ip("127.0.0.1"), 80).allowed);
  // Rules within the range do.
  Verdict v = check_address(p, nullptr, ip("127.0.0.1"), 8080);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.reason, "rule {cidr: 127.0.0.0/8, ports: [8080]}");
  EXPECT_TRUE(check_address(p, nullptr, ip("169.254.169.254"), 80).allowed);
  EXPECT_TRUE(check_address(p, nullptr, ip("::ffff:169.254.169.254"), 80).allowed);

  // Without deny_private the catch-all reaches everything.
  p.deny_private = false;
  EXPECT_TRUE(check_address(p, nullptr, ip("169.254.169.254"), 443).allowed);
  EXPECT_TRUE(check_address(p, nullptr, ip("::1"), 443).allowed);
}

TEST(EgressPolicy, CheckAddressCidrRuleOverridesDenyPrivateOnlyForItsPorts) {
  EgressPolicy p;
  p.allow = {host_rule("db.internal.example", {5432, 6379}), cidr_rule("10.0.0.0/8", {5432})};
  const EgressRule* rule = &p.allow[0];
  Verdict v = check_address(p, rule, ip("10.1.2.3"), 5432);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.reason, "rule {cidr: 10.0.0.0/8, ports: [5432]}") << "the cidr rule is what allowed it";
  EXPECT_TRUE(check_address(p, nullptr, ip("10.1.2.3"), 5432).allowed);

  v = check_address(p, rule, ip("10.1.2.3"), 6379);
  EXPECT_FALSE(v.allowed) << "the cidr rule does not list 6379";
  EXPECT_NE(v.reason.find("deny_private"), std::string::npos) << v.reason;

  v = check_address(p, rule, ip("192.168.1.1"), 5432);
  EXPECT_FALSE(v.allowed) << "outside the cidr rule";
}

TEST(EgressPolicy, CheckAddressDenyPrivateOff) {
  EgressPolicy p;
  p.allow = {host_rule("localhost", {8080})};
  p.deny_private = false;
  EXPECT_TRUE(check_address(p, &p.allow[0], ip("127.0.0.1"), 8080).allowed);
  EXPECT_TRUE(check_address(p, &p.allow[0], ip("::1"), 8080).allowed);
  Verdict v = check_address(p, nullptr, ip("127.0.0.1"), 8080);
  EXPECT_FALSE(v.allowed) << "an address still needs a rule";
  EXPECT_EQ(v.reason, "no rule allows 127.0.0.1 port 8080");
}

TEST(EgressPolicy, CheckAddressIpv4MappedFormIsTheIpv4Address) {
  EgressPolicy p;
  p.allow = {host_rule("api.example.com", {443}), cidr_rule("203.0.113.0/24", {443})};
  Verdict v = check_address(p, &p.allow[0], ip("::ffff:127.0.0.1"), 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.reason.find("127.0.0.1 is loopback"), std::string::npos) << v.reason;
  EXPECT_FALSE(check_address(p, &p.allow[0], ip("::ffff:169.254.169.254"), 443).allowed);

  v = check_address(p, nullptr, ip("::ffff:203.0.113.9"), 443);
  EXPECT_TRUE(v.allowed) << "a v4 cidr rule covers the mapped form";
  EXPECT_EQ(v.reason, "rule {cidr: 203.0.113.0/24, ports: [443]}");
  v = check_address(p, nullptr, ip("::ffff:198.51.100.1"), 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "no rule allows 198.51.100.1 port 443");
}

TEST(EgressPolicy, TheHostsOwnAddressesAndPlatformServicesAreSpecial) {
  EgressPolicy internet;
  internet.allow = {cidr_rule("0.0.0.0/0", {22, 443}), cidr_rule("::/0", {22})};
  const std::vector<IpAddress> host = {ip("192.0.2.2"), ip("2001:db8::2")};
  // A service the host binds to 0.0.0.0 is reached through its own address.
  Verdict v = check_address(internet, nullptr, ip("192.0.2.2"), 22, host);
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.reason.find("an address of this host"), std::string::npos) << v.reason;
  EXPECT_FALSE(check_address(internet, nullptr, ip("2001:db8::2"), 22, host).allowed);
  EXPECT_TRUE(check_address(internet, nullptr, ip("192.0.2.3"), 22, host).allowed);
  // Only a rule naming exactly that address opens it.
  EgressPolicy exact = internet;
  exact.allow.push_back(cidr_rule("192.0.2.2/32", {443}));
  EXPECT_TRUE(check_address(exact, nullptr, ip("192.0.2.2"), 443, host).allowed);
  EXPECT_FALSE(check_address(exact, nullptr, ip("192.0.2.2"), 22, host).allowed);

  // One in a private range or loopback (a cloud host's 10.x) does not open
  // to a rule for that range either: the proxy would reach the host's own
  // services bound to 0.0.0.0 or :: through it.
  const std::vector<IpAddress> cloud_host = {ip("127.0.0.1"), ip("10.9.9.9"), ip("fd00:9::9"), ip("::1")};
  EgressPolicy internal;
  internal.allow = {cidr_rule("10.0.0.0/8", {18083}), cidr_rule("fc00::/7", {18084}), cidr_rule("127.0.0.0/8", {80})};
  v = check_address(internal, nullptr, ip("10.9.9.9"), 18083, cloud_host);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason,
            "10.9.9.9 is an address of this host, refused by deny_private (only a cidr rule naming exactly that "
            "address allows it)");
  EXPECT_TRUE(v.range_refusal) << "the sandbox is told less than this reason";
  EgressPolicy any_address;
  any_address.allow = {cidr_rule("0.0.0.0/0", {80})};
  EXPECT_TRUE(check_address(any_address, nullptr, ip("169.254.169.254"), 80, cloud_host).range_refusal)
      << "the same for any special range, or the host's own would stand apart";
  EXPECT_FALSE(check_address(internal, nullptr, ip("10.9.9.8"), 18084, cloud_host).range_refusal)
      << "a port no rule names is no range refusal";
  EXPECT_FALSE(check_address(internal, nullptr, ip("fd00:9::9"), 18084, cloud_host).allowed);
  EXPECT_FALSE(check_address(internal, nullptr, ip("::ffff:10.9.9.9"), 18083, cloud_host).allowed);
  EXPECT_TRUE(check_address(internal, nullptr, ip("127.0.0.1"), 80, cloud_host).allowed)
      << "a rule within loopback means this host already";
  EXPECT_TRUE(check_address(internal, nullptr, ip("10.9.9.8"), 18083, cloud_host).allowed) << "the rest of the range";
  EXPECT_TRUE(check_address(internal, nullptr, ip("fd00:9::8"), 18084, cloud_host).allowed);
  internal.allow.push_back(cidr_rule("10.9.9.9/32", {18083}));
  EXPECT_TRUE(check_address(internal, nullptr, ip("10.9.9.9"), 18083, cloud_host).allowed);

  EXPECT_NE(private_range(ip("168.63.129.16")).value_or("").find("WireServer"), std::string::npos);
  EXPECT_FALSE(check_address(internet, nullptr, ip("168.63.129.16"), 443).allowed);
  EXPECT_NE(private_range(ip("::ffff:0:a9fe:a9fe")).value_or("").find("IPv4-translated of link-local"),
            std::string::npos);
  EXPECT_EQ(private_range(ip("::ffff:0:cb00:7107")), std::nullopt);  // 203.0.113.7
}

TEST(EgressPolicy, MappedRangesAreRefusedInRules) {
  EXPECT_EQ(cidr_error("::ffff:10.0.0.0/104"),
            "::ffff:10.0.0.0/104 is an IPv4-mapped range: write the IPv4 form (mapped addresses are checked as IPv4)");
  EXPECT_EQ(parse_cidr("::/0").str(), "::/0");
}

TEST(EgressPolicy, HostInterfaceAddressesIncludeLoopback) {
  auto all = host_interface_addresses();
  EXPECT_NE(std::find(all.begin(), all.end(), ip("127.0.0.1")), all.end());
}

}  // namespace
}  // namespace nsbox

namespace nsbox {
namespace {

TEST(FromSockaddr, ReadsBothFamiliesAndRefusesOthers) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  ::inet_pton(AF_INET, "203.0.113.7", &v4.sin_addr);
  EXPECT_EQ(from_sockaddr(reinterpret_cast<sockaddr*>(&v4))->str(), "203.0.113.7");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
  const auto a6 = from_sockaddr(reinterpret_cast<sockaddr*>(&v6));
  ASSERT_TRUE(a6.has_value());
  EXPECT_TRUE(a6->v6);
  EXPECT_EQ(a6->str(), "2001:db8::1");
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  EXPECT_FALSE(from_sockaddr(reinterpret_cast<sockaddr*>(&un)).has_value());
}

}  // namespace
}  // namespace nsbox
