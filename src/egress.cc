#include "nsbox/egress.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <resolv.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>

#include "nsbox/audit.h"
#include "nsbox/error.h"

namespace nsbox {

using Clock = std::chrono::steady_clock;

// Connections served at once; more wait in the listen backlog.
constexpr size_t kMaxActiveConnections = 64;
// Name lookups in flight at once (each on a thread of its own).
constexpr size_t kMaxLookups = 16;
// Connections accepted per run, per request the policy allows: connections
// that never make a request (garbage, nothing) cost the supervisor too. Past
// it the listener is closed and further connects are refused.
constexpr uint64_t kAcceptsPerRequest = 4;
constexpr size_t kRelayBuffer = 64 * 1024;
constexpr int kReplyTimeoutMs = 5000;

struct EgressProxy::Shared {
  EgressPolicy policy;
  EgressTimeouts timeouts;
  UniqueFd stop_fd;  // an eventfd, readable once stop() began: wakes every poll
  UniqueFd cap_fd;   // an eventfd, readable once the run's byte cap is reached: ends every relay
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> bytes_left{0};  // of the run's byte cap

  std::vector<IpAddress> host_addresses;  // the host's own interfaces: special, like loopback

  mutable std::mutex mu;
  std::condition_variable slot;  // active dropped below the cap (or to 0)
  size_t active = 0;
  size_t lookups = 0;
  uint64_t requests = 0;
  uint64_t accepted = 0;
  EgressReport report;
  EgressJournal journal;
};

namespace {

using Shared = EgressProxy::Shared;

int ms_left(Clock::time_point deadline) {
  // Rounded up: waking a little late is fine, before the deadline is not.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

// Waits for events on fd; false on timeout, on stop, or when poll fails.
bool wait_ready(const Shared& s, int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {s.stop_fd.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || fds[1].revents) return false;
    return true;
  }
}

// Reads what is there (at least one byte), or 0 at EOF, -1 on error/timeout/stop.
ssize_t read_some(const Shared& s, int fd, char* buf, size_t size, Clock::time_point deadline) {
  for (;;) {
    ssize_t n = ::read(fd, buf, size);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !wait_ready(s, fd, POLLIN, deadline)) return -1;
  }
}

bool write_all(const Shared& s, int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      if (!wait_ready(s, fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

Clock::time_point after_ms(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A name lookup that a connection may abandon (at its deadline or at stop)
// without waiting for the resolver: the lookup finishes on its own thread.
struct Lookup {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  int status = 0;
  std::vector<IpAddress> addresses;
};

// Resolves host with the host's resolver. The lookup runs on a thread of its
// own that the session may abandon (at its deadline or at stop); its slot
// among kMaxLookups is freed only when the lookup itself ends.
std::vector<IpAddress> resolve(const std::shared_ptr<Shared>& shared, const std::string& host, std::string& error) {
  Shared& s = *shared;
  {
    std::lock_guard lock(s.mu);
    if (s.lookups >= kMaxLookups) {
      error = "cannot resolve " + host + ": too many lookups in flight";
      return {};
    }
    ++s.lookups;
  }
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, shared, host] {
      // The name as checked: the resolver's search domains must not turn it
      // into another one (this thread's resolver state only).
      if (res_init() == 0) _res.options &= ~static_cast<unsigned long>(RES_DNSRCH | RES_DEFNAMES);
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
      std::vector<IpAddress> found;
      for (addrinfo* ai = res; rc == 0 && ai; ai = ai->ai_next) {
        const std::optional<IpAddress> a = from_sockaddr(ai->ai_addr);
        if (a && std::find(found.begin(), found.end(), *a) == found.end()) found.push_back(*a);
      }
      if (res) ::freeaddrinfo(res);
      {
        std::lock_guard lock(lookup->mu);
        lookup->status = rc;
        lookup->addresses = std::move(found);
        lookup->done = true;
        lookup->done_cv.notify_all();
      }
      std::lock_guard lock(shared->mu);
      --shared->lookups;
    }).detach();
  } catch (const std::system_error&) {
    std::lock_guard lock(s.mu);
    --s.lookups;
    error = "cannot resolve " + host + ": no thread for the lookup";
    return {};
  }

  const auto deadline = after_ms(s.timeouts.resolve_ms);
  std::unique_lock lock(lookup->mu);
  while (!lookup->done) {
    if (s.stopping || Clock::now() >= deadline) {
      error = "cannot resolve " + host + ": " + (s.stopping ? "the run ended" : "timed out");
      return {};
    }
    lookup->done_cv.wait_for(lock, std::chrono::milliseconds(50));
  }
  if (lookup->status != 0)
    error = "cannot resolve " + host + ": " + ::gai_strerror(lookup->status);
  else if (lookup->addresses.empty())
    error = "cannot resolve " + host + ": no address";
  return lookup->addresses;
}

// Connects to address:port from the host's network; the fd, or -1 with err.
UniqueFd connect_to(const Shared& s, const IpAddress& address, uint16_t port, Clock::time_point deadline, int& err) {
  sockaddr_storage ss{};
  socklen_t len;
  if (address.v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    std::memcpy(&sin6->sin6_addr, address.bytes.data(), 16);
    len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    std::memcpy(&sin->sin_addr, address.bytes.data(), 4);
    len = sizeof(sockaddr_in);
  }
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    err = errno;
    return {};
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return {};
    }
    if (!wait_ready(s, fd.get(), POLLOUT, deadline)) {
      err = s.stopping ? ECANCELED : ETIMEDOUT;
      return {};
    }
    socklen_t elen = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
    if (err != 0) return {};
  }
  set_nodelay(fd.get());
  return fd;
}

// Takes up to want bytes of the run's byte cap; 0 once it is spent.
size_t reserve_bytes(Shared& s, size_t want) {
  uint64_t left = s.bytes_left.load();
  for (;;) {
    size_t take = static_cast<size_t>(std::min<uint64_t>(left, want));
    if (take == 0) return 0;
    if (s.bytes_left.compare_exchange_weak(left, left - take)) return take;
  }
}

// A relay found no room left in the run's byte cap: said in the report.
// Once the cap is spent to the last byte, every relay of the run ends (an
// idle tunnel too, not only the next one to read); a relay refused for a
// first message larger than what is left ends alone.
// Tells the run's journal, if it has one, what just changed; s.mu is held.
void tell_locked(const Shared& s, EgressJournalEntry::What what, size_t index = 0) {
  if (s.journal) s.journal({s.report, what, index});
}

void byte_cap_reached(Shared& s) {
  {
    std::lock_guard lock(s.mu);
    const bool first = !s.report.byte_cap_hit;
    s.report.byte_cap_hit = true;
    if (first) tell_locked(s, EgressJournalEntry::What::kCounted);
  }
  if (s.bytes_left.load() != 0) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(s.cap_fd.get(), &one, sizeof one);
}

struct Decision {
  EgressVerdict verdict = EgressVerdict::kDenied;
  std::string reason;
  // What the sandbox is told, when it must be told less than the reason
  // (which the Result and the audit log carry): not which address is the
  // host's own, nor what an allowed name resolved to.
  std::string told;
  std::string address;
  UniqueFd upstream;
  int err = 0;               // failed: errno of the last connect, or 0 for a lookup failure
  size_t record = SIZE_MAX;  // index in the report, when recorded
  // A refusal the sandbox is told as a failure (502, not 403), where telling
  // it apart would answer a question: which address is the host's own, which
  // internal names exist. told_err is the failure's errno (0: a lookup).
  bool told_as_failure = false;
  int told_err = 0;
};

// What a refused request asked for, as the report may carry it: printable
// ASCII only (anything else as '?'), at most 256 bytes.
std::string printable_target(std::string_view target) {
  constexpr size_t kMax = 256;
  std::string out;
  for (const char c : target.substr(0, kMax)) out += (c > ' ' && c < 0x7f) ? c : '?';
  if (target.size() > kMax) out += "...";
  return out;
}

class Session {
 public:
  Session(std::shared_ptr<Shared> shared, UniqueFd client) : s_(std::move(shared)), client_(std::move(client)) {}

  void serve() {
    set_nonblocking(client_.get());
    set_nodelay(client_.get());
    deadline_ = after_ms(s_->timeouts.handshake_ms);
    if (!fill(1)) return;
    if (static_cast<uint8_t>(buf_[0]) == 5) {
      serve_socks5();
    } else {
      serve_http();
    }
  }

 private:
  // Reads until buf_ holds at least `want` bytes; false on EOF, error, timeout.
  bool fill(size_t want) {
    char chunk[4096];
    while (buf_.size() < want) {
      ssize_t n = read_some(*s_, client_.get(), chunk, sizeof chunk, deadline_);
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
    }
    return true;
  }

  bool reply(std::string_view data) { return write_all(*s_, client_.get(), data, after_ms(kReplyTimeoutMs)); }

  void serve_http() {
    size_t end;
    while ((end = find_head_end(buf_)) == 0) {
      if (buf_.size() > kMaxProxyHeadBytes) {
        record_http_refusal("its head is larger than 16 KiB");
        reply(http_proxy_response(431, "nsbox egress: request head larger than 16 KiB\n"));
        return;
      }
      if (!fill(buf_.size() + 1)) {
        if (Clock::now() >= deadline_) reply(http_proxy_response(408, "nsbox egress: no request in time\n"));
        return;
      }
    }
    auto parsed = parse_http_proxy_request(std::string_view(buf_).substr(0, end));
    if (auto* e = std::get_if<HttpProxyError>(&parsed)) {
      record_http_refusal(e->message);
      reply(http_proxy_response(e->status, "nsbox egress: " + e->message + "\n"));
      return;
    }
    auto& req = std::get<HttpProxyRequest>(parsed);
    Decision d = decide(req.protocol, req.target);
    const std::string target = req.target.host + ":" + std::to_string(req.target.port);
    if (d.verdict != EgressVerdict::kAllowed) {
      const EgressVerdict told = d.told_as_failure ? EgressVerdict::kFailed : d.verdict;
      int status = told == EgressVerdict::kDenied ? 403 : (d.err == ETIMEDOUT ? 504 : 502);
      reply(http_proxy_response(status, "nsbox egress: " + std::string(to_string(told)) + " " + target + ": " +
                                            (d.told.empty() ? d.reason : d.told) + "\n"));
      return;
    }
    std::string pending = buf_.substr(end);
    std::optional<uint64_t> budget;
    if (req.protocol == ProxyProtocol::kHttpConnect) {
      if (!reply(http_proxy_response(200, ""))) return relay_never_began(d);
    } else {
      if (!req.chunked) {
        budget = req.content_length;
        if (pending.size() > *budget) pending.resize(static_cast<size_t>(*budget));
        *budget -= pending.size();
      }
      pending.insert(0, req.upstream_head);
    }
    if (!relay(d, std::move(pending), budget) && req.protocol == ProxyProtocol::kHttpForward)
      reply(http_proxy_response(403, "nsbox egress: denied " + target + ": the run's byte cap (" +
                                         std::to_string(s_->policy.max_bytes) + " bytes) is reached\n"));
  }

  void serve_socks5() {
    Socks5Greeting greeting;
    size_t used = 0;
    ParseState st;
    while ((st = parse_socks5_greeting(buf_, used, greeting)) == ParseState::kNeedMore)
      if (!fill(buf_.size() + 1)) return;
    if (st == ParseState::kError) {
      record_refusal("socks5", "", 0, "malformed request: a SOCKS5 greeting offering no method");
      return;
    }
    if (!greeting.offers_no_auth) {
      record_refusal("socks5", "", 0, "refused request: SOCKS5 without the no-authentication method");
      reply(std::string("\x05\xff", 2));  // no acceptable method
      return;
    }
    buf_.erase(0, used);
    if (!reply(std::string("\x05\x00", 2))) return;
    Socks5Request req;
    while ((st = parse_socks5_request(buf_, used, req)) == ParseState::kNeedMore)
      if (!fill(buf_.size() + 1)) return;
    if (st == ParseState::kError) {
      record_refusal(
          "socks5", req.target.host, req.target.port,
          req.error_reply == kSocksCommandNotSupported       ? "refused request: SOCKS5 commands other than CONNECT"
          : req.error_reply == kSocksAddressTypeNotSupported ? "refused request: an unknown SOCKS5 address type"
                                                             : "malformed request: a SOCKS5 request out of its format");
      reply(socks5_reply(req.error_reply));
      return;
    }
    Decision d = decide(ProxyProtocol::kSocks5, req.target);
    if (d.verdict != EgressVerdict::kAllowed) {
      reply(socks5_reply(d.told_as_failure                     ? socks_code(d.told_err)
                         : d.verdict == EgressVerdict::kDenied ? kSocksNotAllowed
                                                               : socks_code(d.err)));
      return;
    }
    if (!reply(socks5_reply(kSocksSucceeded))) return relay_never_began(d);
    relay(d, buf_.substr(used), std::nullopt);
  }

  // An allowed connection whose client went before its relay began carried
  // nothing: its bytes (0) are final, as a relay's end would say.
  void relay_never_began(const Decision& d) {
    std::lock_guard lock(s_->mu);
    if (d.record < s_->report.connections.size()) tell_locked(*s_, EgressJournalEntry::What::kRelayed, d.record);
  }

  static uint8_t socks_code(int err) {
    switch (err) {
      case ECONNREFUSED:
        return kSocksConnectionRefused;
      case ENETUNREACH:
        return kSocksNetworkUnreachable;
      case EHOSTUNREACH:
        return kSocksHostUnreachable;
      case ETIMEDOUT:
        return kSocksTtlExpired;
      case 0:
        return kSocksHostUnreachable;  // the name did not resolve
      default:
        return kSocksGeneralFailure;
    }
  }

  // Decides one request against the policy and the caps, and connects when
  // allowed; records the outcome in the report.
  Decision decide(ProxyProtocol protocol, const ProxyTarget& target) {
    Decision d;
    {
      std::lock_guard lock(s_->mu);
      if (s_->requests >= s_->policy.max_connections) {
        s_->report.connection_cap_hit = true;
        ++s_->report.denied;
        tell_locked(*s_, EgressJournalEntry::What::kCounted);
        d.verdict = EgressVerdict::kDenied;
        d.reason = "the run's connection cap (" + std::to_string(s_->policy.max_connections) + ") is reached";
        return d;
      }
      ++s_->requests;
    }
    std::vector<IpAddress> candidates;
    const EgressRule* host_rule = nullptr;
    if (target.address) {
      candidates.push_back(*target.address);
    } else {
      Verdict v = check_name(s_->policy, target.host, target.port);
      if (!v.allowed) return record(protocol, target, {EgressVerdict::kDenied, v.reason, "", "", {}, 0});
      host_rule = v.host_rule;
      std::string error;
      candidates = resolve(s_, target.host, error);
      if (candidates.empty()) return record(protocol, target, {EgressVerdict::kFailed, error, "", "", {}, 0});
    }
    std::vector<IpAddress> allowed;
    Verdict first_denial;
    for (const auto& a : candidates) {
      Verdict v = check_address(s_->policy, host_rule, a, target.port, s_->host_addresses);
      if (v.allowed) {
        allowed.push_back(a);
        if (d.reason.empty()) d.reason = v.reason;
      } else if (first_denial.reason.empty()) {
        first_denial = v;
        d.address = canonical(a).str();
      }
    }
    if (allowed.empty()) {
      Decision denied{EgressVerdict::kDenied,
                      target.address ? first_denial.reason : target.host + ": " + first_denial.reason,
                      "",
                      d.address,
                      {},
                      0};
      if (!target.address) {
        // As a name that does not resolve: else a wildcard rule would map
        // which names exist behind it (an internal zone's, say).
        denied.told = "cannot resolve " + target.host + ": " + ::gai_strerror(EAI_NONAME);
        denied.told_as_failure = true;
      } else if (first_denial.this_host) {
        // As a closed port: else, among its neighbours (which are tried),
        // the one refused would be the host's.
        denied.told =
            "connect to " + d.address + " port " + std::to_string(target.port) + ": " + std::strerror(ECONNREFUSED);
        denied.told_as_failure = true;
        denied.told_err = ECONNREFUSED;
      } else if (first_denial.range_refusal) {
        denied.told = d.address + " is refused by the profile's egress rules";
      }
      return record(protocol, target, std::move(denied));
    }
    const auto deadline = after_ms(s_->timeouts.connect_ms);
    int err = 0;
    for (const auto& a : allowed) {
      UniqueFd fd = connect_to(*s_, a, target.port, deadline, err);
      if (fd)
        return record(protocol, target, {EgressVerdict::kAllowed, d.reason, "", canonical(a).str(), std::move(fd), 0});
      if (Clock::now() >= deadline || s_->stopping) break;
    }
    const std::string port = " port " + std::to_string(target.port) + ": " + std::strerror(err);
    return record(protocol, target,
                  {EgressVerdict::kFailed,
                   "connect to " + canonical(allowed.front()).str() + port,
                   target.address ? "" : "connect to " + target.host + port,
                   canonical(allowed.front()).str(),
                   {},
                   err});
  }

  // A request refused before any target was checked (malformed, or asking
  // for what the proxy does not do) is recorded as denied like any other,
  // so that such attempts show in the Result, the audit log and the
  // metrics; it counts against max_connections, and past the cap it is
  // counted only, as other requests are.
  void record_refusal(const char* protocol, std::string_view target, uint16_t port, const std::string& reason) {
    std::lock_guard lock(s_->mu);
    EgressReport& r = s_->report;
    ++r.denied;
    if (s_->requests >= s_->policy.max_connections) {
      r.connection_cap_hit = true;
      tell_locked(*s_, EgressJournalEntry::What::kCounted);
      return;
    }
    ++s_->requests;
    r.connections.push_back(
        {protocol, printable_target(target), port, "", EgressVerdict::kDenied, reason, 0, 0, utc_timestamp()});
    tell_locked(*s_, EgressJournalEntry::What::kDecided, r.connections.size() - 1);
  }

  // An HTTP request refused by the parser, named by its request line's
  // method (CONNECT or not) and target as the client wrote them.
  void record_http_refusal(const std::string& why) {
    const std::string_view line = std::string_view(buf_).substr(0, buf_.find_first_of("\r\n"));
    const size_t method_end = line.find(' ');
    const std::string_view method = line.substr(0, method_end);
    std::string_view target;
    if (method_end != std::string_view::npos) {
      target = line.substr(method_end + 1);
      target = target.substr(0, target.find(' '));
    }
    record_refusal(method == "CONNECT" ? "http-connect" : "http", target, 0, "malformed request: " + why);
  }

  Decision record(ProxyProtocol protocol, const ProxyTarget& target, Decision d) {
    std::lock_guard lock(s_->mu);
    EgressReport& r = s_->report;
    switch (d.verdict) {
      case EgressVerdict::kAllowed:
        ++r.allowed;
        break;
      case EgressVerdict::kDenied:
        ++r.denied;
        break;
      case EgressVerdict::kFailed:
        ++r.failed;
        break;
    }
    d.record = r.connections.size();
    r.connections.push_back(
        {to_string(protocol), target.host, target.port, d.address, d.verdict, d.reason, 0, 0, utc_timestamp()});
    tell_locked(*s_, EgressJournalEntry::What::kDecided, d.record);
    return d;
  }

  // One direction of a relay: bytes read from `from`, waiting to go to `to`.
  struct Pipe {
    int from;
    int to;
    std::string buf;
    size_t off = 0;
    bool eof = false;   // nothing more will be read from `from`
    bool shut = false;  // `to` was told (SHUT_WR)
    uint64_t total = 0;
    std::optional<uint64_t> budget;  // bytes `from` may still send
    // The request body is complete: `from` is only watched for its close
    // (which ends the exchange), and anything more it sends is dropped.
    bool draining = false;
    bool pending() const { return off < buf.size(); }
  };

  // Relays until both sides are done; false when the run's byte cap left no
  // room even for what the proxy already holds (nothing was sent upstream).
  bool relay(Decision& d, std::string first_up, std::optional<uint64_t> client_budget) {
    const int up_fd = d.upstream.get();
    Pipe up{client_.get(), up_fd, std::move(first_up), 0, false, false, 0, client_budget};
    Pipe down{up_fd, client_.get(), {}, 0, false, false, 0, std::nullopt};
    // What the proxy already holds for upstream (a forwarded head, early
    // data) is the sandbox's traffic too: counted, and within the cap.
    const size_t first = up.buf.size();
    if (size_t got = reserve_bytes(*s_, first); got < first) {
      s_->bytes_left += got;
      byte_cap_reached(*s_);
      relay_never_began(d);
      return false;
    }
    up.total = first;
    bool hung_up[2] = {false, false};  // POLLHUP seen where nothing was asked: stop polling it
    bool ok = true;
    while (ok && !(up.eof && down.eof && !up.pending() && !down.pending())) {
      pollfd fds[4] = {
          {client_.get(), 0, 0}, {up_fd, 0, 0}, {s_->stop_fd.get(), POLLIN, 0}, {s_->cap_fd.get(), POLLIN, 0}};
      auto want = [](Pipe& p, pollfd& from_pfd, pollfd& to_pfd) {
        if (p.pending())
          to_pfd.events |= POLLOUT;
        else if (!p.eof || p.draining)
          from_pfd.events |= POLLIN;
      };
      want(up, fds[0], fds[1]);
      want(down, fds[1], fds[0]);
      for (int i = 0; i < 2; ++i)
        if (hung_up[i] && fds[i].events == 0) fds[i].fd = -1;
      int n = ::poll(fds, 4, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || fds[2].revents || fds[3].revents) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents & (POLLERR | POLLNVAL)) ok = false;
        if ((fds[i].revents & POLLHUP) && fds[i].events == 0) hung_up[i] = true;
      }
      auto readable = [](const pollfd& p) { return (p.revents & (POLLIN | POLLHUP)) != 0; };
      ok = ok && step(up, readable(fds[0])) && step(down, readable(fds[1]));
    }
    std::lock_guard lock(s_->mu);
    s_->report.bytes_sent += up.total;
    s_->report.bytes_received += down.total;
    if (d.record < s_->report.connections.size()) {
      s_->report.connections[d.record].bytes_sent = up.total;
      s_->report.connections[d.record].bytes_received = down.total;
      tell_locked(*s_, EgressJournalEntry::What::kRelayed, d.record);
    } else {
      tell_locked(*s_, EgressJournalEntry::What::kCounted);
    }
    return true;
  }

  // Sends what is pending without blocking; false when `to` is gone.
  static bool flush(Pipe& p) {
    while (p.pending()) {
      ssize_t n = ::send(p.to, p.buf.data() + p.off, p.buf.size() - p.off, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      p.off += static_cast<size_t>(n);
    }
    p.buf.clear();
    p.off = 0;
    return true;
  }

  // After the request body: reads and drops what comes; false at the
  // client's close (nobody is left to answer).
  static bool drain(Pipe& p) {
    char scratch[4096];
    ssize_t n = ::read(p.from, scratch, sizeof scratch);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    return n > 0;
  }

  // Moves what it can in one direction without blocking: flushes, then, when
  // `from` is readable, reads once (within the budget and the run's byte
  // cap). false ends the relay.
  bool step(Pipe& p, bool readable) {
    if (!flush(p)) return false;
    if (p.pending()) return true;
    if (p.draining) return !readable || drain(p);
    if (p.eof) {
      if (!p.shut) ::shutdown(p.to, SHUT_WR);
      p.shut = true;
      return true;
    }
    size_t want = kRelayBuffer;
    if (p.budget) want = static_cast<size_t>(std::min<uint64_t>(want, *p.budget));
    if (want == 0) {
      p.eof = true;  // the request body is complete; nothing more goes upstream
      p.shut = true;
      p.draining = true;
      return true;
    }
    if (!readable) return true;
    const size_t granted = reserve_bytes(*s_, want);
    if (granted == 0) {
      byte_cap_reached(*s_);
      return false;
    }
    p.buf.resize(granted);
    ssize_t n = ::read(p.from, p.buf.data(), granted);
    s_->bytes_left += granted - static_cast<size_t>(std::max<ssize_t>(n, 0));
    if (n < 0) {
      p.buf.clear();
      return errno == EAGAIN || errno == EINTR;
    }
    p.buf.resize(static_cast<size_t>(n));
    if (n == 0) {
      p.eof = true;
      p.shut = true;
      ::shutdown(p.to, SHUT_WR);  // pass the half-close on
      return true;
    }
    p.total += static_cast<uint64_t>(n);
    if (p.budget) *p.budget -= static_cast<uint64_t>(n);
    return flush(p);
  }

  std::shared_ptr<Shared> s_;
  UniqueFd client_;
  std::string buf_;
  Clock::time_point deadline_;
};

}  // namespace

EgressProxy::EgressProxy(EgressPolicy policy, EgressTimeouts timeouts) : shared_(std::make_shared<Shared>()) {
  shared_->policy = std::move(policy);
  shared_->timeouts = timeouts;
  shared_->bytes_left = shared_->policy.max_bytes;
  shared_->host_addresses = host_interface_addresses();
  shared_->stop_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  shared_->cap_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!shared_->stop_fd || !shared_->cap_fd) throw SysError("eventfd", "egress proxy", errno);
}

EgressProxy::~EgressProxy() { stop(); }

void EgressProxy::start(UniqueFd listener) {
  if (listener_ || stopped_) return;
  int listening = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(listener.get(), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) return;
  listener_ = std::move(listener);
  set_nonblocking(listener_.get());
  acceptor_ = std::thread([this] { accept_loop(); });
}

void EgressProxy::accept_loop() {
  for (;;) {
    {
      // At the cap, new connections wait in the listen backlog.
      std::unique_lock lock(shared_->mu);
      shared_->slot.wait(lock, [&] { return shared_->active < kMaxActiveConnections || shared_->stopping; });
      if (shared_->stopping) return;
      const uint64_t budget = std::max<uint64_t>(shared_->policy.max_connections, 16) * kAcceptsPerRequest;
      if (shared_->accepted >= budget) {
        // A flood of connections that make no request: refuse the rest.
        shared_->report.connection_cap_hit = true;
        tell_locked(*shared_, EgressJournalEntry::What::kCounted);
        listener_.reset();
        return;
      }
    }
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {shared_->stop_fd.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        ::poll(nullptr, 0, 50);  // leave it in the backlog; let sessions close fds
        continue;
      }
      return;
    }
    std::unique_lock lock(shared_->mu);
    ++shared_->accepted;
    ++shared_->active;
    lock.unlock();
    try {
      std::thread([shared = shared_, fd = client.get()] {
        Session(shared, UniqueFd(fd)).serve();
        std::lock_guard l(shared->mu);
        --shared->active;
        shared->slot.notify_all();
      }).detach();
      client.release();  // the session owns it now
    } catch (const std::system_error&) {
      // No thread for it (the host is out of tasks): drop this connection.
      std::lock_guard l(shared_->mu);
      --shared_->active;
    }
  }
}

void EgressProxy::stop() {
  if (stopped_) return;
  stopped_ = true;
  shared_->stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(shared_->stop_fd.get(), &one, sizeof one);
  std::unique_lock lock(shared_->mu);
  shared_->slot.notify_all();  // the acceptor may be waiting for a slot
  lock.unlock();
  if (acceptor_.joinable()) acceptor_.join();
  listener_.reset();
  lock.lock();
  shared_->slot.wait(lock, [&] { return shared_->active == 0; });
  // Every session is done with it; lookups never use it. Closed here rather
  // than with the last reference, which a lookup thread may hold a while.
  shared_->stop_fd.reset();
  shared_->cap_fd.reset();
}

EgressReport EgressProxy::report() const {
  std::lock_guard lock(shared_->mu);
  return shared_->report;
}

void EgressProxy::set_journal(EgressJournal journal) {
  std::lock_guard lock(shared_->mu);
  shared_->journal = std::move(journal);
  // The report so far (empty before any code ran): a run that dies before
  // its first request still shows it had egress, with nothing done.
  tell_locked(*shared_, EgressJournalEntry::What::kCounted);
}

std::vector<std::pair<std::string, std::string>> egress_environment(const EgressPolicy& policy,
                                                                    const std::string& node_options) {
  const std::string http = std::string("http://") + kEgressProxyHost + ":" + std::to_string(kEgressProxyPort);
  const std::string socks = std::string("socks5h://") + kEgressProxyHost + ":" + std::to_string(kEgressProxyPort);
  // The sandbox's own loopback is reached directly, unless the profile grants
  // the host's loopback through the proxy (as the proxy would decide it):
  // then loopback URLs must go to the proxy.
  bool grants_loopback = false;
  for (const char* loopback : {"127.0.0.1", "::1"}) {
    const IpAddress a = *parse_ip(loopback);
    for (const auto& rule : policy.allow) {
      if (rule.ports.empty()) continue;
      const EgressRule* host_rule = !rule.cidr && host_matches(rule.host, "localhost") ? &rule : nullptr;
      if (check_address(policy, host_rule, a, rule.ports.front()).allowed) grants_loopback = true;
    }
  }
  const std::string no_proxy = grants_loopback ? "" : "localhost,127.0.0.1,::1";
  std::string node = std::string("--require=") + kNodeEgressPreload;
  return {
      {"HTTP_PROXY", http},
      {"http_proxy", http},
      {"HTTPS_PROXY", http},
      {"https_proxy", http},
      {"ALL_PROXY", socks},
      {"all_proxy", socks},
      {"NO_PROXY", no_proxy},
      {"no_proxy", no_proxy},
      {"NODE_OPTIONS", node_options.empty() ? node : node_options + " " + node},
  };
}

}  // namespace nsbox
