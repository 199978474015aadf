// EgressProxy end to end over real loopback TCP: a client in the test speaks
// HTTP CONNECT, absolute-URI HTTP or SOCKS5 to the proxy, which connects to an
// upstream server thread in the test. 127.0.0.1 only; no privileges. Every
// wait is bounded (SO_RCVTIMEO/SO_SNDTIMEO, poll), every thread joined, and
// each test checks that no fd was left open.
#include "nsbox/egress.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The longest any single read or write in these tests may block.
constexpr int kIoTimeoutMs = 5000;
const std::string kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";

// The open fds and what they are ("5 -> socket:[1234]").
std::set<std::string> open_fds() {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(entry.path(), ec);
    out.insert(entry.path().filename().string() + " -> " + (ec ? "?" : target.string()));
  }
  return out;
}

// Declared first in a test, so it checks after everything else is gone. The
// proxy's detached connection threads drop their reference to its shared
// state (and with it the stop eventfd) just after stop() returns, so the check
// waits a little (bounded) for the count to settle.
struct NoFdLeak {
  std::set<std::string> before = open_fds();
  ~NoFdLeak() {
    std::set<std::string> now = open_fds();
    for (auto deadline = Clock::now() + milliseconds(2000); now != before && Clock::now() < deadline;) {
      std::this_thread::sleep_for(milliseconds(10));
      now = open_fds();
    }
    std::string diff;
    for (const auto& fd : now)
      if (!before.count(fd)) diff += " +" + fd;
    for (const auto& fd : before)
      if (!now.count(fd)) diff += " -" + fd;
    EXPECT_EQ(now.size(), before.size()) << "fds changed:" << diff;
  }
};

void set_io_timeouts(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(port);
  return sin;
}

UniqueFd listen_loopback(uint16_t& port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd);
  sockaddr_in sin = loopback(0);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  EXPECT_EQ(::listen(fd.get(), 64), 0);
  socklen_t len = sizeof sin;
  EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len), 0);
  port = ntohs(sin.sin_port);
  return fd;
}

// A port on 127.0.0.1 nothing listens on.
uint16_t closed_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin = loopback(0);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  socklen_t len = sizeof sin;
  EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len), 0);
  return ntohs(sin.sin_port);
}

UniqueFd dial(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd);
  set_io_timeouts(fd.get(), kIoTimeoutMs);
  sockaddr_in sin = loopback(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0) << std::strerror(errno);
  return fd;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

struct ReadResult {
  std::string data;
  bool eof = false;  // the peer closed (FIN)
  int err = 0;       // otherwise: EAGAIN for the timeout, ECONNRESET, ...
  bool closed() const { return eof || err == ECONNRESET; }
};

// Reads until EOF, an error, the socket's timeout or `limit` bytes.
ReadResult read_to_eof(int fd, size_t limit = 4u << 20) {
  ReadResult r;
  char buf[16384];
  while (r.data.size() < limit) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.err = errno;
      break;
    }
    if (n == 0) {
      r.eof = true;
      break;
    }
    r.data.append(buf, static_cast<size_t>(n));
  }
  return r;
}

std::string read_exact(int fd, size_t size) {
  std::string out;
  char buf[16384];
  while (out.size() < size) {
    ssize_t n = ::recv(fd, buf, std::min(sizeof buf, size - out.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A server on 127.0.0.1:0 standing in for the internet. Each connection is
// served on its own thread; stop() (or the destructor) joins them all.
class Upstream {
 public:
  enum class Mode {
    kHttp,   // reads a request (head + Content-Length body), answers with its request line and body, closes
    kEcho,   // echoes every byte; at EOF sends "bye" and closes
    kFlood,  // sends flood_bytes bytes, closes
  };

  explicit Upstream(Mode mode, size_t flood_bytes = 0) : mode_(mode), flood_bytes_(flood_bytes) {
    listener_ = listen_loopback(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;
  ~Upstream() { stop(); }

  void stop() {
    stopping_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    listener_.reset();
  }

  uint16_t port() const { return port_; }
  // What each accepted connection received, in the order accepted.
  std::vector<std::string> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  size_t accepted() const { return seen().size(); }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      const size_t slot = seen_.size();
      seen_.emplace_back();
      threads_.emplace_back([this, fd, slot] { serve(UniqueFd(fd), slot); });
    }
  }

  void record(size_t slot, std::string_view data) {
    std::lock_guard lock(mu_);
    seen_[slot].append(data);
  }

  void serve(UniqueFd fd, size_t slot) {
    set_io_timeouts(fd.get(), kIoTimeoutMs);
    char buf[16384];
    if (mode_ == Mode::kEcho) {
      for (;;) {
        ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return;
        if (n == 0) {
          send_all(fd.get(), "bye");
          return;
        }
        record(slot, std::string_view(buf, static_cast<size_t>(n)));
        if (!send_all(fd.get(), std::string_view(buf, static_cast<size_t>(n)))) return;
      }
    }
    if (mode_ == Mode::kFlood) {
      const std::string chunk(16384, 'x');
      for (size_t sent = 0; sent < flood_bytes_;) {
        size_t n = std::min(chunk.size(), flood_bytes_ - sent);
        if (!send_all(fd.get(), std::string_view(chunk).substr(0, n))) return;
        sent += n;
      }
      return;
    }
    // kHttp
    std::string data;
    size_t head_end = std::string::npos;
    size_t body_size = 0;
    for (;;) {
      if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
        head_end += 4;
        std::string lower_head = data.substr(0, head_end);
        for (char& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (size_t cl = lower_head.find("\r\ncontent-length:"); cl != std::string::npos)
          body_size = std::stoul(lower_head.substr(cl + 17));
      }
      if (head_end != std::string::npos && data.size() >= head_end + body_size) break;
      ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        record(slot, data);
        return;
      }
      data.append(buf, static_cast<size_t>(n));
    }
    record(slot, data);
    const std::string body = data.substr(0, data.find("\r\n")) + "\n" + data.substr(head_end);
    send_all(fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n" + body);
  }

  Mode mode_;
  size_t flood_bytes_;
  uint16_t port_ = 0;
  UniqueFd listener_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> threads_;
  std::vector<std::string> seen_;
};

// A started proxy on 127.0.0.1:port.
struct RunningProxy {
  uint16_t port = 0;
  EgressProxy proxy;
  explicit RunningProxy(EgressPolicy policy, EgressTimeouts timeouts = {}) : proxy(std::move(policy), timeouts) {
    proxy.start(listen_loopback(port));
  }
};

EgressRule cidr_rule(const std::string& cidr, std::vector<uint16_t> ports) { return {"", parse_cidr(cidr), ports}; }

// Allows 127.0.0.1 on the given ports, nothing else.
EgressPolicy allow_loopback(std::vector<uint16_t> ports) {
  EgressPolicy p;
  p.allow = {cidr_rule("127.0.0.1/32", std::move(ports))};
  return p;
}

std::string rule_text(uint16_t port) { return "rule {cidr: 127.0.0.1/32, ports: [" + std::to_string(port) + "]}"; }

std::string connect_head(const std::string& authority) {
  return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
}

std::string loopback_authority(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// The body of an HTTP answer (everything after the head).
std::string body_of(const std::string& response) {
  size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

const std::string kSocksGreeting("\x05\x01\x00", 3);
const std::string kSocksNoAuth("\x05\x00", 2);

std::string socks_connect_ipv4(uint16_t port) {
  return std::string("\x05\x01\x00\x01\x7f\x00\x00\x01", 8) + static_cast<char>(port >> 8) +
         static_cast<char>(port & 0xff);
}

std::string socks_connect_domain(const std::string& host, uint16_t port) {
  return std::string("\x05\x01\x00\x03", 4) + static_cast<char>(host.size()) + host + static_cast<char>(port >> 8) +
         static_cast<char>(port & 0xff);
}

// ---- CONNECT ----

TEST(EgressProxy, ConnectTunnelRoundTripAndHalfClose) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  {
    UniqueFd c = dial(px.port);
    // Early data in the same segment as the head goes through the tunnel.
    ASSERT_TRUE(send_all(c.get(), connect_head(loopback_authority(up.port())) + "ping"));
    EXPECT_EQ(read_exact(c.get(), kEstablished.size()), kEstablished);
    EXPECT_EQ(read_exact(c.get(), 4), "ping");
    ASSERT_TRUE(send_all(c.get(), "pong"));
    EXPECT_EQ(read_exact(c.get(), 4), "pong");
    // Half-close: the upstream sees EOF, and can still answer afterwards.
    ASSERT_TRUE(send_all(c.get(), "tail"));
    ASSERT_EQ(::shutdown(c.get(), SHUT_WR), 0);
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.eof) << "errno " << r.err;
    EXPECT_EQ(r.data, "tailbye");
  }
  px.proxy.stop();
  up.stop();
  ASSERT_EQ(up.seen().size(), 1u);
  EXPECT_EQ(up.seen()[0], "pingpongtail");

  EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.allowed, 1u);
  EXPECT_EQ(rep.denied, 0u);
  EXPECT_EQ(rep.failed, 0u);
  EXPECT_EQ(rep.bytes_sent, 12u);
  EXPECT_EQ(rep.bytes_received, 15u);
  ASSERT_EQ(rep.connections.size(), 1u);
  const EgressConnection& c = rep.connections[0];
  EXPECT_EQ(c.protocol, "http-connect");
  EXPECT_EQ(c.host, "127.0.0.1");
  EXPECT_EQ(c.port, up.port());
  EXPECT_EQ(c.address, "127.0.0.1");
  EXPECT_STREQ(to_string(c.verdict), "allowed");
  EXPECT_EQ(c.reason, rule_text(up.port()));
  EXPECT_EQ(c.bytes_sent, 12u);
  EXPECT_EQ(c.bytes_received, 15u);
}

TEST(EgressProxy, DeniedConnectGets403NamingHostPortAndReason) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  struct Case {
    std::string authority;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"10.1.2.3:443", "no rule allows 10.1.2.3 port 443"},
      {"evil.example.com:443",
       "no rule allows evil.example.com:443 (only host rules allow names; the name was not "
       "resolved)"},
      {"127.0.0.1:1", "port 1 is not in rule {cidr: 127.0.0.1/32, ports: [" + std::to_string(up.port()) + "]}"},
  };
  for (const Case& k : cases) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(k.authority)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << k.authority << ": errno " << r.err;
    EXPECT_EQ(r.data.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << r.data;
    EXPECT_EQ(body_of(r.data), "nsbox egress: denied " + k.authority + ": " + k.reason + "\n");
  }
  px.proxy.stop();
  EXPECT_EQ(up.accepted(), 0u) << "nothing denied reaches the upstream";
  EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.denied, 3u);
  ASSERT_EQ(rep.connections.size(), 3u);
  EXPECT_EQ(rep.connections[0].address, "10.1.2.3");
  EXPECT_EQ(rep.connections[1].address, "") << "a denied name is never resolved";
  EXPECT_EQ(rep.connections[1].host, "evil.example.com");
  for (const auto& c : rep.connections) {
    EXPECT_STREQ(to_string(c.verdict), "denied");
    EXPECT_EQ(c.bytes_sent + c.bytes_received, 0u);
  }
}

TEST(EgressProxy, ConnectToAClosedPortIs502Failed) {
  NoFdLeak guard;
  const uint16_t port = closed_port();
  RunningProxy px(allow_loopback({port}));
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(loopback_authority(port))));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "errno " << r.err;
    EXPECT_EQ(r.data.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0), 0u) << r.data;
    EXPECT_EQ(body_of(r.data), "nsbox egress: failed " + loopback_authority(port) + ": connect to 127.0.0.1 port " +
                                   std::to_string(port) + ": Connection refused\n");
  }
  px.proxy.stop();
  EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.failed, 1u);
  EXPECT_EQ(rep.allowed, 0u);
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_STREQ(to_string(rep.connections[0].verdict), "failed");
  EXPECT_EQ(rep.connections[0].address, "127.0.0.1");
}

// Each is an attempt the audit must show (a request for the metadata
// service in a form the parser refuses is still one): recorded as denied,
// with the request line's target as written, made printable.
TEST(EgressProxy, MalformedRequestsAreAnsweredAndRecordedAsDenied) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kHttp);
  RunningProxy px(allow_loopback({up.port()}));
  struct Case {
    std::string request;
    std::string status_line;
    std::string recorded_target;
  };
  const std::string versioned = "http://127.0.0.1:" + std::to_string(up.port()) + "/";
  for (const Case& k : std::vector<Case>{
           {"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n", "/"},
           {"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n", "https://127.0.0.1/"},
           {"GET " + versioned + " HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported\r\n", versioned},
           {"GET http://user@169.254.169.254/latest HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
            "http://user@169.254.169.254/latest"},
           {std::string("GET http://a\x01\xff/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 Bad Request\r\n",
            "http://a?"
            "?/"},
           // One byte over the limit and no end: all of it is read before the answer.
           {"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + std::string(kMaxProxyHeadBytes - 34, 'a'),
            "HTTP/1.1 431 Request Header Fields Too Large\r\n", "http://127.0.0.1/"},
       }) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), k.request));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "errno " << r.err;
    EXPECT_EQ(r.data.rfind(k.status_line, 0), 0u) << r.data;
  }
  px.proxy.stop();
  EXPECT_EQ(up.accepted(), 0u);
  const EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.denied, 6u);
  ASSERT_EQ(rep.connections.size(), 6u);
  const std::vector<std::string> targets = {"/",
                                            "https://127.0.0.1/",
                                            versioned,
                                            "http://user@169.254.169.254/latest",
                                            "http://a?"
                                            "?/",
                                            "http://127.0.0.1/"};
  for (size_t i = 0; i < targets.size(); ++i) {
    const EgressConnection& c = rep.connections[i];
    EXPECT_EQ(c.protocol, "http");
    EXPECT_EQ(c.host, targets[i]);
    EXPECT_STREQ(to_string(c.verdict), "denied");
    EXPECT_EQ(c.reason.rfind("malformed request: ", 0), 0u) << c.reason;
  }
  EXPECT_EQ(rep.connections[5].reason, "malformed request: its head is larger than 16 KiB");
}

// They count against max_connections like any request: past it, counted only.
TEST(EgressProxy, MalformedRequestsCountAgainstTheConnectionCap) {
  NoFdLeak guard;
  EgressPolicy p = allow_loopback({80});
  p.max_connections = 2;
  RunningProxy px(p);
  for (int i = 0; i < 3; ++i) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), "CONNECT 169.254.169.254@x:80 HTTP/1.1\r\n\r\n"));
    ReadResult r = read_to_eof(c.get());
    EXPECT_EQ(r.data.rfind("HTTP/1.1 400 ", 0), 0u) << r.data;
  }
  px.proxy.stop();
  const EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.denied, 3u);
  EXPECT_TRUE(rep.connection_cap_hit);
  ASSERT_EQ(rep.connections.size(), 2u);
  EXPECT_EQ(rep.connections[0].protocol, "http-connect");
  EXPECT_EQ(rep.connections[0].host, "169.254.169.254@x:80");
}

// ---- HTTP forwarding ----

TEST(EgressProxy, HttpForwardSendsOriginFormUpstream) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kHttp);
  RunningProxy px(allow_loopback({up.port()}));
  const std::string authority = loopback_authority(up.port());
  std::string response;
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), "GET http://" + authority +
                                      "/path?q=1#frag HTTP/1.1\r\nProxy-Connection: keep-alive\r\n"
                                      "Proxy-Authorization: Basic dTpw\r\nAccept: */*\r\n\r\n"));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.eof) << "errno " << r.err;
    response = r.data;
  }
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_EQ(body_of(response), "GET /path?q=1 HTTP/1.1\n");
  px.proxy.stop();
  up.stop();
  ASSERT_EQ(up.seen().size(), 1u);
  const std::string expected_head =
      "GET /path?q=1 HTTP/1.1\r\nHost: " + authority + "\r\nAccept: */*\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(up.seen()[0], expected_head);

  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_EQ(rep.connections[0].protocol, "http");
  EXPECT_STREQ(to_string(rep.connections[0].verdict), "allowed");
  EXPECT_EQ(rep.connections[0].bytes_sent, expected_head.size()) << "the rewritten head counts";
  EXPECT_EQ(rep.connections[0].bytes_received, response.size());
}

TEST(EgressProxy, HttpForwardPostBodyArrivesIntact) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kHttp);
  RunningProxy px(allow_loopback({up.port()}));
  std::string body;
  for (int i = 0; body.size() < 100000; ++i) body += std::to_string(i) + ",";
  const std::string head =
      "POST http://" + loopback_authority(up.port()) +
      "/upload HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  std::string response;
  {
    UniqueFd c = dial(px.port);
    // The head with the start of the body, then the rest in pieces.
    ASSERT_TRUE(send_all(c.get(), head + body.substr(0, 10)));
    for (size_t off = 10; off < body.size(); off += 30000) ASSERT_TRUE(send_all(c.get(), body.substr(off, 30000)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.eof) << "errno " << r.err;
    response = r.data;
  }
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response.substr(0, 200);
  EXPECT_TRUE(body_of(response) == "POST /upload HTTP/1.1\n" + body) << "the body came back changed";
  px.proxy.stop();
  up.stop();
  ASSERT_EQ(up.seen().size(), 1u);
  const std::string upstream_head = "POST /upload HTTP/1.1\r\nHost: " + loopback_authority(up.port()) +
                                    "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                                    "\r\nConnection: close\r\n\r\n";
  EXPECT_TRUE(up.seen()[0] == upstream_head + body) << up.seen()[0].substr(0, 300);
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_EQ(rep.connections[0].bytes_sent, upstream_head.size() + body.size());
}

// ---- SOCKS5 ----

TEST(EgressProxy, Socks5Ipv4) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting));
    EXPECT_EQ(read_exact(c.get(), 2), kSocksNoAuth);
    ASSERT_TRUE(send_all(c.get(), socks_connect_ipv4(up.port())));
    EXPECT_EQ(read_exact(c.get(), 10), socks5_reply(kSocksSucceeded));
    ASSERT_TRUE(send_all(c.get(), "hello"));
    EXPECT_EQ(read_exact(c.get(), 5), "hello");
    ::shutdown(c.get(), SHUT_WR);
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.eof) << "errno " << r.err;
    EXPECT_EQ(r.data, "bye");
  }
  px.proxy.stop();
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_EQ(rep.connections[0].protocol, "socks5");
  EXPECT_EQ(rep.connections[0].host, "127.0.0.1");
  EXPECT_EQ(rep.connections[0].port, up.port());
  EXPECT_STREQ(to_string(rep.connections[0].verdict), "allowed");
  EXPECT_EQ(rep.connections[0].bytes_sent, 5u);
  EXPECT_EQ(rep.connections[0].bytes_received, 8u);
}

// Runs a SOCKS5 CONNECT to localhost:port; the reply code.
uint8_t socks_localhost(uint16_t proxy_port, uint16_t port) {
  UniqueFd c = dial(proxy_port);
  if (!send_all(c.get(), kSocksGreeting) || read_exact(c.get(), 2) != kSocksNoAuth) return 0xff;
  if (!send_all(c.get(), socks_connect_domain("LocalHost", port))) return 0xff;
  std::string reply = read_exact(c.get(), 10);
  if (reply.size() != 10) return 0xff;
  EXPECT_EQ(reply, socks5_reply(static_cast<uint8_t>(reply[1])));
  if (reply[1] == kSocksSucceeded) {
    EXPECT_TRUE(send_all(c.get(), "x"));
    EXPECT_EQ(read_exact(c.get(), 1), "x");
  }
  return static_cast<uint8_t>(reply[1]);
}

// Why the proxy decided its last request as it did.
std::string last_reason(const EgressProxy& proxy) {
  EgressReport rep = proxy.report();
  return rep.connections.empty()
             ? "(nothing recorded)"
             : std::string(to_string(rep.connections.back().verdict)) + ": " + rep.connections.back().reason;
}

TEST(EgressProxy, Socks5DomainLocalhostRefusedByDenyPrivate) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p;
  p.allow = {EgressRule{"localhost", std::nullopt, {up.port()}}};
  RunningProxy px(p);
  EXPECT_EQ(socks_localhost(px.port, up.port()), kSocksHostUnreachable)
      << "told as a name that does not resolve: " << last_reason(px.proxy);
  px.proxy.stop();
  EXPECT_EQ(up.accepted(), 0u);
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  const EgressConnection& c = rep.connections[0];
  EXPECT_EQ(c.host, "localhost") << "normalized";
  EXPECT_STREQ(to_string(c.verdict), "denied");
  EXPECT_TRUE(c.address == "127.0.0.1" || c.address == "::1") << c.address;
  EXPECT_EQ(c.reason.rfind("localhost: " + c.address + " is loopback", 0), 0u) << c.reason;
  EXPECT_NE(c.reason.find("refused by deny_private"), std::string::npos) << c.reason;
}

// The sandbox has no DNS of its own: a refusal does not tell it what an
// allowed name resolved to (an internal zone's answers), nor that it
// resolved at all (a wildcard rule would map which names exist): it is
// answered as a name that does not resolve. The Result and the audit log
// say what happened.
TEST(EgressProxy, ARefusedNameDoesNotTellTheSandboxItsAddresses) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p;
  p.allow = {EgressRule{"localhost", std::nullopt, {up.port()}}};
  RunningProxy px(p);
  const std::string authority = "localhost:" + std::to_string(up.port());
  UniqueFd c = dial(px.port);
  ASSERT_TRUE(send_all(c.get(), connect_head(authority)));
  ReadResult r = read_to_eof(c.get());
  EXPECT_EQ(r.data.rfind("HTTP/1.1 502 ", 0), 0u) << r.data;
  EXPECT_EQ(body_of(r.data),
            "nsbox egress: failed " + authority + ": cannot resolve localhost: " + ::gai_strerror(EAI_NONAME) + "\n");
  px.proxy.stop();
  EXPECT_EQ(up.accepted(), 0u);
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_NE(rep.connections[0].reason.find(" is loopback"), std::string::npos) << rep.connections[0].reason;
}

// Under a rule for a range that holds one of the host's own addresses, that
// address is refused (its services would be reached through the proxy)
// without a connection: answered as a closed port, as its neighbours may
// be, it cannot be told apart as the host's. Nothing but the host's own
// address is ever a target here.
TEST(EgressProxy, TheHostsOwnAddressInAnOpenedRangeIsAnsweredAsAClosedPort) {
  NoFdLeak guard;
  std::optional<IpAddress> own;
  for (const IpAddress& a : host_interface_addresses())
    if (!a.v6 && !is_loopback(a)) own = a;
  if (!own) GTEST_SKIP() << "this host has no IPv4 address but loopback";
  IpAddress base = *own;
  base.bytes[3] &= 0xfe;  // a /31 holding it and one neighbour
  EgressPolicy p;
  p.allow = {EgressRule{"", Cidr{base, 31}, {443}}};
  RunningProxy px(p);
  const std::string authority = own->str() + ":443";
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(authority)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_EQ(r.data.rfind("HTTP/1.1 502 ", 0), 0u) << r.data;
    EXPECT_EQ(body_of(r.data), "nsbox egress: failed " + authority + ": connect to " + own->str() +
                                   " port 443: " + std::strerror(ECONNREFUSED) + "\n");
  }
  {
    UniqueFd c = dial(px.port);
    std::string request = std::string("\x05\x01\x00\x01", 4);
    request.append(reinterpret_cast<const char*>(own->bytes.data()), 4);
    request += std::string("\x01\xbb", 2);
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + request));
    EXPECT_EQ(read_exact(c.get(), 12), kSocksNoAuth + socks5_reply(kSocksConnectionRefused));
  }
  px.proxy.stop();
  const EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 2u);
  for (const EgressConnection& c : rep.connections) {
    EXPECT_EQ(c.verdict, EgressVerdict::kDenied) << "on record as what it was";
    EXPECT_NE(c.reason.find("an address of this host"), std::string::npos) << c.reason;
  }
}

TEST(EgressProxy, Socks5DomainLocalhostAllowedWithoutDenyPrivate) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p;
  p.allow = {EgressRule{"localhost", std::nullopt, {up.port()}}};
  p.deny_private = false;
  RunningProxy px(p);
  EXPECT_EQ(socks_localhost(px.port, up.port()), kSocksSucceeded) << last_reason(px.proxy);
  px.proxy.stop();
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_STREQ(to_string(rep.connections[0].verdict), "allowed");
  EXPECT_EQ(rep.connections[0].address, "127.0.0.1") << "the address it reached (::1 has no listener)";
  EXPECT_EQ(rep.connections[0].reason, "rule {host: localhost, ports: [" + std::to_string(up.port()) + "]}");
}

TEST(EgressProxy, Socks5DomainLocalhostAllowedByACidrRule) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p;
  p.allow = {EgressRule{"localhost", std::nullopt, {up.port()}}, cidr_rule("127.0.0.1/32", {up.port()})};
  RunningProxy px(p);
  EXPECT_EQ(socks_localhost(px.port, up.port()), kSocksSucceeded) << last_reason(px.proxy);
  px.proxy.stop();
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_STREQ(to_string(rep.connections[0].verdict), "allowed");
  EXPECT_EQ(rep.connections[0].address, "127.0.0.1");
  EXPECT_EQ(rep.connections[0].reason, rule_text(up.port()));
}

TEST(EgressProxy, Socks5RefusalsOnTheWire) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  {
    // No acceptable authentication method.
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), std::string("\x05\x01\x02", 3)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed());
    EXPECT_EQ(r.data, std::string("\x05\xff", 2));
  }
  {
    // BIND is not offered.
    UniqueFd c = dial(px.port);
    std::string bind = socks_connect_ipv4(up.port());
    bind[1] = '\x02';
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + bind));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed());
    EXPECT_EQ(r.data, kSocksNoAuth + socks5_reply(kSocksCommandNotSupported));
  }
  {
    // A denied address: 0x02.
    UniqueFd c = dial(px.port);
    std::string req = socks_connect_ipv4(up.port());
    req[4] = '\x0a';  // 10.0.0.1
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + req));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed());
    EXPECT_EQ(r.data, kSocksNoAuth + socks5_reply(kSocksNotAllowed));
  }
  {
    // UDP ASSOCIATE is not offered either.
    UniqueFd c = dial(px.port);
    std::string udp = socks_connect_ipv4(up.port());
    udp[1] = '\x03';
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + udp));
    EXPECT_EQ(read_to_eof(c.get()).data, kSocksNoAuth + socks5_reply(kSocksCommandNotSupported));
  }
  px.proxy.stop();
  EXPECT_EQ(up.accepted(), 0u);
  // Every one is in the report, refused before a target was checked or not.
  const EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.denied, 4u);
  ASSERT_EQ(rep.connections.size(), 4u);
  for (const auto& c : rep.connections) {
    EXPECT_EQ(c.protocol, "socks5");
    EXPECT_STREQ(to_string(c.verdict), "denied");
  }
  EXPECT_EQ(rep.connections[0].reason, "refused request: SOCKS5 without the no-authentication method");
  EXPECT_EQ(rep.connections[1].reason, "refused request: SOCKS5 commands other than CONNECT");
  EXPECT_EQ(rep.connections[2].address, "10.0.0.1");
  EXPECT_EQ(rep.connections[3].reason, "refused request: SOCKS5 commands other than CONNECT");
}

TEST(EgressProxy, Socks5ConnectionRefused) {
  NoFdLeak guard;
  const uint16_t port = closed_port();
  RunningProxy px(allow_loopback({port}));
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + socks_connect_ipv4(port)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed());
    EXPECT_EQ(r.data, kSocksNoAuth + socks5_reply(kSocksConnectionRefused));
  }
  px.proxy.stop();
  ASSERT_EQ(px.proxy.report().connections.size(), 1u);
  EXPECT_STREQ(to_string(px.proxy.report().connections[0].verdict), "failed");
}

// ---- the report and the caps ----

TEST(EgressProxy, ReportRecordsVerdictsAddressesAndBytesInOrder) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  const uint16_t closed = closed_port();
  RunningProxy px(allow_loopback({up.port(), closed}));
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(loopback_authority(up.port()))));
    EXPECT_EQ(read_exact(c.get(), kEstablished.size()), kEstablished);
    ASSERT_TRUE(send_all(c.get(), "0123456789"));
    EXPECT_EQ(read_exact(c.get(), 10), "0123456789");
    ::shutdown(c.get(), SHUT_WR);
    EXPECT_EQ(read_to_eof(c.get()).data, "bye");
  }
  for (const std::string& authority : {std::string("192.168.0.1:80"), loopback_authority(closed)}) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(authority)));
    EXPECT_TRUE(read_to_eof(c.get()).closed());
  }
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), kSocksGreeting + socks_connect_ipv4(up.port()) + "abc"));
    EXPECT_EQ(read_exact(c.get(), 12), kSocksNoAuth + socks5_reply(kSocksSucceeded));
    EXPECT_EQ(read_exact(c.get(), 3), "abc") << "early data after the request";
    ::shutdown(c.get(), SHUT_WR);
    EXPECT_EQ(read_to_eof(c.get()).data, "bye");
  }
  px.proxy.stop();
  EgressReport rep = px.proxy.report();
  EXPECT_EQ(rep.allowed, 2u);
  EXPECT_EQ(rep.denied, 1u);
  EXPECT_EQ(rep.failed, 1u);
  EXPECT_EQ(rep.bytes_sent, 13u);
  EXPECT_EQ(rep.bytes_received, 19u);
  EXPECT_FALSE(rep.connection_cap_hit);
  EXPECT_FALSE(rep.byte_cap_hit);
  ASSERT_EQ(rep.connections.size(), 4u);
  struct Expected {
    const char* protocol;
    std::string host;
    uint16_t port;
    const char* address;
    const char* verdict;
    uint64_t sent;
    uint64_t received;
  };
  const Expected expected[] = {
      {"http-connect", "127.0.0.1", up.port(), "127.0.0.1", "allowed", 10, 13},
      {"http-connect", "192.168.0.1", 80, "192.168.0.1", "denied", 0, 0},
      {"http-connect", "127.0.0.1", closed, "127.0.0.1", "failed", 0, 0},
      {"socks5", "127.0.0.1", up.port(), "127.0.0.1", "allowed", 3, 6},
  };
  for (size_t i = 0; i < 4; ++i) {
    const EgressConnection& c = rep.connections[i];
    EXPECT_EQ(c.protocol, expected[i].protocol) << i;
    EXPECT_EQ(c.host, expected[i].host) << i;
    EXPECT_EQ(c.port, expected[i].port) << i;
    EXPECT_EQ(c.address, expected[i].address) << i;
    EXPECT_STREQ(to_string(c.verdict), expected[i].verdict) << i;
    EXPECT_EQ(c.bytes_sent, expected[i].sent) << i;
    EXPECT_EQ(c.bytes_received, expected[i].received) << i;
    EXPECT_FALSE(c.reason.empty()) << i;
  }
  EXPECT_EQ(rep.connections[1].reason, "no rule allows 192.168.0.1 port 80");
  EXPECT_NE(rep.connections[2].reason.find("Connection refused"), std::string::npos) << rep.connections[2].reason;
}

// The journal hears of each change as it happens, not when the run ends:
// what a worker sends the node at once. A decision while its connection is
// still open, the bytes when its relay ends, a request past the cap as a
// count; and the report so far as soon as it is set.
TEST(EgressProxy, TheJournalIsToldEachChangeAsItHappens) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy policy = allow_loopback({up.port()});
  policy.max_connections = 3;
  RunningProxy px(std::move(policy));
  using What = EgressJournalEntry::What;
  struct Told {
    What what;
    size_t index;
    EgressConnection connection;  // the one index names, as it stood
    uint64_t denied;
    bool cap_hit;
  };
  std::mutex mu;
  std::vector<Told> told;
  px.proxy.set_journal([&](const EgressJournalEntry& e) {
    std::lock_guard lock(mu);
    told.push_back({e.what, e.index,
                    e.index < e.report.connections.size() ? e.report.connections[e.index] : EgressConnection{},
                    e.report.denied, e.report.connection_cap_hit});
  });
  auto told_now = [&] {
    std::lock_guard lock(mu);
    return told;
  };
  ASSERT_EQ(told_now().size(), 1u) << "the report so far, at once";
  EXPECT_EQ(told_now()[0].what, What::kCounted);

  UniqueFd tunnel = dial(px.port);
  ASSERT_TRUE(send_all(tunnel.get(), connect_head(loopback_authority(up.port()))));
  EXPECT_EQ(read_exact(tunnel.get(), kEstablished.size()), kEstablished);
  ASSERT_EQ(told_now().size(), 2u) << "told before its tunnel closed";
  EXPECT_EQ(told_now()[1].what, What::kDecided);
  EXPECT_EQ(told_now()[1].connection.verdict, EgressVerdict::kAllowed);
  EXPECT_EQ(told_now()[1].connection.bytes_sent, 0u) << "decided, nothing relayed yet";
  ASSERT_TRUE(send_all(tunnel.get(), "0123456789"));
  EXPECT_EQ(read_exact(tunnel.get(), 10), "0123456789");
  ::shutdown(tunnel.get(), SHUT_WR);
  EXPECT_EQ(read_to_eof(tunnel.get()).data, "bye");
  tunnel.reset();
  for (int i = 0; i < 200 && told_now().size() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(told_now().size(), 3u);
  EXPECT_EQ(told_now()[2].what, What::kRelayed);
  EXPECT_EQ(told_now()[2].index, 0u);
  EXPECT_EQ(told_now()[2].connection.bytes_sent, 10u) << "the relay's bytes, final";
  EXPECT_EQ(told_now()[2].connection.bytes_received, 13u);

  for (const char* request : {"CONNECT 192.168.0.1:80 HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                              "CONNECT 192.168.0.2:80 HTTP/1.1\r\n\r\n"}) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), request));
    read_to_eof(c.get());
  }
  px.proxy.stop();
  const std::vector<Told> all = told_now();
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[3].what, What::kDecided);
  EXPECT_EQ(all[3].connection.reason, "no rule allows 192.168.0.1 port 80");
  EXPECT_EQ(all[4].what, What::kDecided) << "a refusal before any target is told too";
  EXPECT_EQ(all[4].connection.protocol, "http");
  EXPECT_EQ(all[5].what, What::kCounted) << "past the cap: counted, not recorded";
  EXPECT_EQ(all[5].denied, 3u);
  EXPECT_TRUE(all[5].cap_hit);
  const EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 3u);
  for (size_t i : {size_t{1}, size_t{3}, size_t{4}})
    EXPECT_EQ(all[i].connection.time, rep.connections[all[i].index].time) << i;
}

TEST(EgressProxy, ConnectionCapDeniesTheFourthRequest) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kHttp);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_connections = 3;
  RunningProxy px(p);
  const std::string request = "GET http://" + loopback_authority(up.port()) + "/n HTTP/1.1\r\n\r\n";
  for (int i = 0; i < 4; ++i) {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), request));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << i;
    if (i < 3) {
      EXPECT_EQ(r.data.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << i << ": " << r.data;
    } else {
      EXPECT_EQ(r.data.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << r.data;
      EXPECT_NE(body_of(r.data).find("the run's connection cap (3) is reached"), std::string::npos) << r.data;
    }
  }
  px.proxy.stop();
  up.stop();
  EXPECT_EQ(up.accepted(), 3u);
  EgressReport rep = px.proxy.report();
  EXPECT_TRUE(rep.connection_cap_hit);
  EXPECT_EQ(rep.allowed, 3u);
  EXPECT_EQ(rep.denied, 1u);
  EXPECT_EQ(rep.connections.size(), 3u) << "at most max_connections entries";
}

TEST(EgressProxy, ByteCapCutsTheRelay) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kFlood, 100000);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_bytes = 10000;
  RunningProxy px(p);
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), connect_head(loopback_authority(up.port()))));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "errno " << r.err;
    ASSERT_EQ(r.data.rfind(kEstablished, 0), 0u) << r.data.substr(0, 100);
    const size_t relayed = r.data.size() - kEstablished.size();
    EXPECT_LE(relayed, 10000u);
    EXPECT_GT(relayed, 0u);
    EXPECT_EQ(r.data.find_first_not_of('x', kEstablished.size()), std::string::npos);
  }
  px.proxy.stop();
  up.stop();
  EgressReport rep = px.proxy.report();
  EXPECT_TRUE(rep.byte_cap_hit);
  EXPECT_LE(rep.bytes_sent + rep.bytes_received, 10000u);
  EXPECT_GT(rep.bytes_received, 0u);
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_EQ(rep.connections[0].bytes_received, rep.bytes_received);
}

// A CONNECT tunnel through the proxy to 127.0.0.1:up_port, established.
UniqueFd open_tunnel(uint16_t proxy_port, uint16_t up_port) {
  UniqueFd c = dial(proxy_port);
  EXPECT_TRUE(send_all(c.get(), connect_head(loopback_authority(up_port))));
  EXPECT_EQ(read_exact(c.get(), kEstablished.size()), kEstablished);
  return c;
}

// At the cap every tunnel of the run is closed, an idle one too: not only
// the next one to read.
TEST(EgressProxy, ByteCapClosesEveryTunnelOfTheRun) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_bytes = 1000;
  RunningProxy px(p);
  UniqueFd idle = open_tunnel(px.port, up.port());
  UniqueFd busy = open_tunnel(px.port, up.port());
  send_all(busy.get(), std::string(4000, 'x'));  // may be cut short by the close
  EXPECT_TRUE(read_to_eof(busy.get()).closed());
  // Well before the upstream's own idle timeout (kIoTimeoutMs) would end it.
  set_io_timeouts(idle.get(), kIoTimeoutMs / 3);
  const ReadResult r = read_to_eof(idle.get());
  EXPECT_TRUE(r.closed()) << "the idle tunnel is still open past the cap (errno " << r.err << ")";
  EXPECT_EQ(r.data, "") << "it carried nothing";
  px.proxy.stop();
  up.stop();
  const EgressReport rep = px.proxy.report();
  EXPECT_TRUE(rep.byte_cap_hit);
  EXPECT_LE(rep.bytes_sent + rep.bytes_received, 1000u);
}

// A forwarded head larger than what is left of the cap ends its own
// request only: the cap is not spent, and other tunnels go on.
TEST(EgressProxy, AHeadOverWhatIsLeftEndsOnlyItsOwnRequest) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_bytes = 100;
  RunningProxy px(p);
  UniqueFd tunnel = open_tunnel(px.port, up.port());
  {
    UniqueFd big = dial(px.port);
    ASSERT_TRUE(send_all(
        big.get(), "GET http://" + loopback_authority(up.port()) + "/" + std::string(200, 'a') + " HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(read_to_eof(big.get()).data.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u);
  }
  ASSERT_TRUE(send_all(tunnel.get(), "ping"));
  EXPECT_EQ(read_exact(tunnel.get(), 4), "ping") << "the tunnel was closed while 100 bytes were left";
  tunnel.reset();
  px.proxy.stop();
  up.stop();
  EXPECT_TRUE(px.proxy.report().byte_cap_hit);
}

TEST(EgressProxy, ByteCapCountsAForwardedHead) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kHttp);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_bytes = 100;
  RunningProxy px(p);
  {
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(
        c.get(), "GET http://" + loopback_authority(up.port()) + "/" + std::string(200, 'a') + " HTTP/1.1\r\n\r\n"));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed());
    // The head alone is over the cap: nothing goes upstream, and the client
    // is told why.
    EXPECT_EQ(r.data.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << r.data;
    EXPECT_NE(r.data.find("the run's byte cap (100 bytes) is reached"), std::string::npos) << r.data;
  }
  px.proxy.stop();
  up.stop();
  EXPECT_TRUE(px.proxy.report().byte_cap_hit);
  EXPECT_EQ(px.proxy.report().bytes_sent, 0u);
}

// ---- stopping and timeouts ----

TEST(EgressProxy, StopClosesAnOpenTunnelPromptly) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  UniqueFd c = dial(px.port);
  ASSERT_TRUE(send_all(c.get(), connect_head(loopback_authority(up.port()))));
  EXPECT_EQ(read_exact(c.get(), kEstablished.size()), kEstablished);
  ASSERT_TRUE(send_all(c.get(), "ping"));
  EXPECT_EQ(read_exact(c.get(), 4), "ping");

  const auto start = Clock::now();
  px.proxy.stop();
  const auto took = Clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(2)) << "stop() waited for the tunnel";
  ReadResult r = read_to_eof(c.get());
  EXPECT_TRUE(r.closed()) << "the client is still connected: errno " << r.err;
  EXPECT_EQ(r.data, "");
  px.proxy.stop();  // idempotent
  EgressReport rep = px.proxy.report();
  ASSERT_EQ(rep.connections.size(), 1u);
  EXPECT_EQ(rep.connections[0].bytes_sent, 4u);
  EXPECT_EQ(rep.connections[0].bytes_received, 4u);
  // A new client is not served any more.
  UniqueFd late(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin = loopback(px.port);
  EXPECT_NE(::connect(late.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0) << "the listener is closed";
}

TEST(EgressProxy, SilentClientIsDroppedAtTheHandshakeTimeout) {
  NoFdLeak guard;
  EgressTimeouts t;
  t.handshake_ms = 200;
  RunningProxy px(allow_loopback({80}), t);
  {
    UniqueFd c = dial(px.port);  // 5 s receive timeout, the default handshake is 10 s
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "not dropped: errno " << r.err;
    EXPECT_EQ(r.data, "");
  }
  {
    // A head that never ends is answered 408 and dropped.
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), "GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127"));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "not dropped: errno " << r.err;
    EXPECT_EQ(r.data.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << r.data;
  }
  {
    // Half a SOCKS5 greeting.
    UniqueFd c = dial(px.port);
    ASSERT_TRUE(send_all(c.get(), std::string("\x05\x02\x00", 3)));
    ReadResult r = read_to_eof(c.get());
    EXPECT_TRUE(r.closed()) << "not dropped: errno " << r.err;
    EXPECT_EQ(r.data, "");
  }
  px.proxy.stop();
  EXPECT_TRUE(px.proxy.report().connections.empty());
}

TEST(EgressProxy, ManyClientsAtOnce) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  RunningProxy px(allow_loopback({up.port()}));
  constexpr int kClients = 16;
  std::vector<UniqueFd> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(dial(px.port));
    ASSERT_TRUE(send_all(clients.back().get(), connect_head(loopback_authority(up.port()))));
  }
  for (int i = 0; i < kClients; ++i) {
    int fd = clients[static_cast<size_t>(i)].get();
    EXPECT_EQ(read_exact(fd, kEstablished.size()), kEstablished) << i;
    const std::string msg = "client " + std::to_string(i);
    ASSERT_TRUE(send_all(fd, msg));
    EXPECT_EQ(read_exact(fd, msg.size()), msg) << i;
  }
  for (auto& c : clients) {
    ::shutdown(c.get(), SHUT_WR);
    EXPECT_EQ(read_to_eof(c.get()).data, "bye");
  }
  clients.clear();
  px.proxy.stop();
  EXPECT_EQ(px.proxy.report().allowed, static_cast<uint64_t>(kClients));
}

// Whether fd has bytes (or EOF) within ms.
bool readable_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

TEST(EgressProxy, ClientsBeyondSixtyFourWaitInTheBacklog) {
  NoFdLeak guard;
  Upstream up(Upstream::Mode::kEcho);
  EgressPolicy p = allow_loopback({up.port()});
  p.max_connections = 200;
  RunningProxy px(p);
  constexpr size_t kClients = 80, kServed = 64;
  std::vector<UniqueFd> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.push_back(dial(px.port));
    ASSERT_TRUE(send_all(clients.back().get(), connect_head(loopback_authority(up.port()))));
  }
  // 64 tunnels open; the others are neither answered nor dropped.
  std::vector<size_t> open, waiting;
  for (size_t i = 0; i < kClients; ++i) {
    if (readable_within(clients[i].get(), open.size() < kServed ? 2000 : 300)) {
      EXPECT_EQ(read_exact(clients[i].get(), kEstablished.size()), kEstablished) << i;
      open.push_back(i);
    } else {
      waiting.push_back(i);
    }
  }
  ASSERT_EQ(open.size(), kServed);
  ASSERT_EQ(waiting.size(), kClients - kServed);
  // Closing tunnels frees slots: every waiting client is served in turn.
  for (size_t k = 0; k < waiting.size(); ++k) clients[open[k]].reset();
  for (size_t i : waiting) {
    ASSERT_TRUE(readable_within(clients[i].get(), 5000)) << "client " << i << " was never served";
    EXPECT_EQ(read_exact(clients[i].get(), kEstablished.size()), kEstablished) << i;
  }
  clients.clear();
  px.proxy.stop();
  EXPECT_EQ(px.proxy.report().allowed, kClients);
}

TEST(EgressProxy, AFloodOfConnectionsWithoutRequestsClosesTheListener) {
  NoFdLeak guard;
  EgressPolicy p = allow_loopback({80});
  p.max_connections = 16;  // the proxy accepts 4 x 16 connections in all
  RunningProxy px(p);
  int refused = 0;
  for (int i = 0; i < 200 && refused == 0; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sin = loopback(px.port);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
      EXPECT_EQ(errno, ECONNREFUSED);
      ++refused;
      continue;
    }
    send_all(fd.get(), "x\r\n\r\n");
    read_to_eof(fd.get());  // 400, or a reset once the listener is gone
  }
  EXPECT_EQ(refused, 1) << "the proxy kept accepting";
  px.proxy.stop();
  const EgressReport rep = px.proxy.report();
  EXPECT_TRUE(rep.connection_cap_hit);
  // Each was a malformed request: the first 16 listed, every one counted.
  EXPECT_EQ(rep.connections.size(), 16u);
  EXPECT_EQ(rep.denied, 64u);
}

TEST(EgressEnvironment, ClientsFindTheProxyAndKeepTheirOwnLoopback) {
  auto value = [](const auto& env, const std::string& key) {
    for (const auto& [k, v] : env)
      if (k == key) return v;
    return std::string("(unset)");
  };
  EgressPolicy internet;
  internet.allow = {cidr_rule("0.0.0.0/0", {443})};
  auto env = egress_environment(internet, "--max-old-space-size=256");
  EXPECT_EQ(value(env, "HTTP_PROXY"), "http://127.0.0.1:3128");
  EXPECT_EQ(value(env, "https_proxy"), "http://127.0.0.1:3128");
  EXPECT_EQ(value(env, "ALL_PROXY"), "socks5h://127.0.0.1:3128");
  EXPECT_EQ(value(env, "NODE_OPTIONS"), "--max-old-space-size=256 --require=/opt/nsbox/egress.js");
  // deny_private keeps the host's loopback out of 0.0.0.0/0: the sandbox's
  // own loopback stays direct.
  EXPECT_EQ(value(env, "NO_PROXY"), "localhost,127.0.0.1,::1");

  EgressPolicy host_loopback = allow_loopback({8080});
  EXPECT_EQ(value(egress_environment(host_loopback, ""), "no_proxy"), "");
  internet.deny_private = false;
  EXPECT_EQ(value(egress_environment(internet, ""), "NO_PROXY"), "");
  EXPECT_EQ(value(egress_environment(internet, ""), "NODE_OPTIONS"), "--require=/opt/nsbox/egress.js");
}

}  // namespace
}  // namespace nsbox
