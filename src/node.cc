#include "nsbox/node.h"

#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <httplib.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "nsbox/admission.h"
#include "nsbox/api.h"
#include "nsbox/arrival.h"
#include "nsbox/audit.h"
#include "nsbox/cgroup.h"
#include "nsbox/chunked_framing.h"
#include "nsbox/digest.h"
#include "nsbox/error.h"
#include "nsbox/health.h"
#include "nsbox/metrics.h"
#include "nsbox/profile_apply.h"
#include "nsbox/request_head.h"
#include "nsbox/seccomp.h"
#include "nsbox/spawner.h"
#include "nsbox/units.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr size_t kSpareThreads = 4;  // health and metrics while every slot is busy
constexpr size_t kMaxThreads = 1024;
// cpp-httplib's bound on a request line with its CRLF, past which it answers 414.
constexpr size_t kMaxRequestLine = 8192;

constexpr size_t kPendingPerThread = 2;  // accepted connections waiting for a thread
constexpr size_t kMaxShedQueue = 256;
// How long cpp-httplib waits for a request to start; the arrival watch hands
// it a connection only once its head has arrived, so this never runs out.
constexpr time_t kKeepAliveSeconds = 5;
constexpr int kListenBacklog = 1024;

// A body past body_limit is still read and dropped, up to this much past
// it, before its 413 goes out. Closed with the body unread, the connection
// is reset, and a client still sending (curl without Expect, Python's
// http.client) gets the reset instead of the answer. A larger body is
// refused as soon as the headers announce it, as is any past the limit
// whose client waits for 100 Continue: it has sent nothing.
constexpr uint64_t kDrainedPastTheLimit = 64ull << 20;

uint64_t drained_body_max(uint64_t body_limit) { return body_limit + kDrainedPastTheLimit; }

// Tells the service manager (systemd's Type=notify, through $NOTIFY_SOCKET)
// where the node stands: READY once every listener accepts, RELOADING and
// READY around a SIGHUP, STOPPING at a drain. Does nothing without one.
void notify_service_manager(const std::string& state) {
  if (int err = ::sd_notify(0, state.c_str()); err < 0)
    spdlog::warn("notify the service manager ({}): {}", state.substr(0, state.find('\n')), std::strerror(-err));
}

std::string serving_status(const NodeConfig& c) {
  return "STATUS=serving " + std::to_string(c.tenants.size()) + " tenants, max_concurrent " +
         std::to_string(c.max_concurrent) + ", queue_depth " + std::to_string(c.queue_depth);
}

std::string monotonic_usec_now() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return std::to_string(static_cast<uint64_t>(now.tv_sec) * 1000000 + static_cast<uint64_t>(now.tv_nsec) / 1000);
}

// Each listener's request threads: made at start, for the config of then.
size_t request_threads(const NodeConfig& c) {
  return std::min(kMaxThreads, static_cast<size_t>(c.max_concurrent) + c.queue_depth + kSpareThreads);
}

// Set on the thread that answers connections beyond the node's capacity:
// they get a 429 without touching the admission queue.
thread_local bool t_shedding = false;

// Whether the client of socket (-1: unknown) closed its connection, or shut
// it for sending: no one is left to read an answer.
bool client_went_away(int socket) {
  if (socket < 0) return false;
  pollfd p{socket, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// An fd that turns readable when the node cancels its runs (node_cancel)
// or the client goes away (client, as client_went_away): a run waits on
// it, and its sandbox is torn down at either. Invalid when it cannot be
// made; the node's alone then applies.
UniqueFd cancel_on_node_or_client(int node_cancel, int client) {
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep || client < 0) return {};
  epoll_event node{};
  node.events = EPOLLIN;
  // Data the client sends is no reason to cancel: only its going away is.
  epoll_event gone{};
  gone.events = EPOLLRDHUP;
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, node_cancel, &node) != 0 ||
      ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, client, &gone) != 0)
    return {};
  return ep;
}

// httplib's ThreadPool queues accepted connections without bound, and
// gives each a thread before its request has arrived. Here a connection
// reaches the threads only once its head has arrived (ArrivalWatch), and at
// most max_pending wait for a thread; beyond that a connection goes to the
// shed lane, a single thread that only answers 429, and when that is full
// too, the watch answers 429 itself without reading the request.
class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(size_t threads, size_t max_pending, ArrivalWatch::Limits limits, ArrivalWatch::Refused refused,
                   ArrivalWatch::Screen screen)
      : max_pending_(max_pending),
        watch_(
            limits, [this](ArrivalWatch::Job& job) { return queue(job); }, std::move(refused), std::move(screen)) {
    for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(jobs_, jobs_ready_, false); });
    workers_.emplace_back([this] { work(shed_, shed_ready_, true); });
  }
  ~BoundedTaskQueue() override { shutdown(); }

  // On the accept thread, right after accept(): what is accepted waits for its head.
  void enqueue(std::function<void()> fn) override {
    const int fd = take_accepted_socket();
    if (fd >= 0) return watch_.admit(fd, std::move(fn));
    // Only if cpp-httplib stopped calling accept(): served as before the
    // watch, with no deadline on the request and no bound on its head.
    if (!warned_unseen_.exchange(true))
      spdlog::error(
          "the accepted socket was not seen: request_timeout, the {} KiB head limit and the {}-byte bound on a "
          "chunked body's framing lines are not enforced",
          kMaxRequestHead / 1024, kMaxFramingLine);
    if (queue(fn)) return;
    t_shedding = true;
    fn();
    t_shedding = false;
  }

  void shutdown() override {
    watch_.close_arrivals();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    jobs_ready_.notify_all();
    shed_ready_.notify_all();
    for (auto& t : workers_) t.join();
    watch_.stop();  // the requests being read kept their deadlines until here
  }

 private:
  bool queue(ArrivalWatch::Job& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return false;  // no thread would take it
    // One connection wakes one thread: each lane has its own condition
    // variable, so the wake-up cannot go to a thread of the other lane.
    if (jobs_.size() < max_pending_) {
      jobs_.push_back(std::move(fn));
      jobs_ready_.notify_one();
      return true;
    }
    if (shed_.size() < kMaxShedQueue) {
      shed_.push_back(std::move(fn));
      shed_ready_.notify_one();
      return true;
    }
    return false;
  }

  void work(std::deque<std::function<void()>>& queue, std::condition_variable& ready, bool shedding) {
    t_shedding = shedding;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready.wait(lock, [&] { return stopped_ || !queue.empty(); });
        if (queue.empty()) return;
        fn = std::move(queue.front());
        queue.pop_front();
      }
      fn();
    }
  }

  size_t max_pending_;
  std::mutex mutex_;
  std::condition_variable jobs_ready_;
  std::condition_variable shed_ready_;
  std::deque<std::function<void()>> jobs_;
  std::deque<std::function<void()>> shed_;
  std::vector<std::thread> workers_;
  bool stopped_ = false;
  std::atomic<bool> warned_unseen_{false};
  ArrivalWatch watch_;  // last: its thread queues into the members above
};

// n random bytes as hex: run ids (16) and node ids (8).
std::string random_hex_id(size_t n, const char* what) {
  unsigned char bytes[16];
  if (n > sizeof bytes || ::getrandom(bytes, n, 0) != static_cast<ssize_t>(n)) throw SysError("getrandom", what, errno);
  return to_hex(bytes, n);
}

std::string new_run_id() { return random_hex_id(16, "run id"); }

std::string error_body(const std::string& message) { return platform_answer(nullptr, message); }

const char* status_message(int status) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 404:
      return "not found: the node serves POST /run, POST /v1/runs, GET /health and GET /metrics";
    case 405:
      return "method not allowed";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    default:
      return "request failed";
  }
}

std::string too_large_message(uint64_t body_limit) {
  return "request body exceeds the node's limit of " + format_size(body_limit);
}

constexpr const char* kOverloadMessage = "too many requests: the node is at capacity; retry later";
std::string framing_too_long_message() {
  return "a chunked body's framing line (a chunk size with its extensions, the line after a chunk, or the last "
         "line) is longer than " +
         std::to_string(kMaxFramingLine) + " bytes";
}

constexpr const char* kMultipartRefusal =
    "a multipart/form-data body is not a run request: send the request as a JSON object";

// An answer that refuses a request.
struct Refusal {
  int status = 0;  // 0: none
  const char* reason = "bad_request";
  std::string message;
};

// A tenant at its max_requests.
Refusal tenant_limit_refusal(const TenantConfig& tenant) {
  return {429, "tenant_limit",
          "too many requests: tenant " + tenant.name + " already has " + std::to_string(tenant.max_requests) +
              " requests in (arriving, queued or running; its max_requests); retry later"};
}

// Whether a multipart Content-Type names a boundary as cpp-httplib reads
// it (all that follows "boundary=", less a pair of quotes; not empty):
// without one it reads nothing of the body.
bool has_multipart_boundary(const httplib::Request& req) {
  const std::string type = req.get_header_value("Content-Type");
  const size_t at = type.find("boundary=");
  if (at == std::string::npos) return false;
  std::string boundary = type.substr(at + 9);
  if (boundary.size() >= 2 && boundary.front() == '"' && boundary.back() == '"')
    boundary = boundary.substr(1, boundary.size() - 2);
  return !boundary.empty();
}

bool takes_a_body(const httplib::Request& req) {
  return req.method == "POST" && (req.path == "/run" || req.path == "/v1/runs");
}

// Why a request is refused on its head alone (status 0: it is not), before
// any of its body is read or the client is told to send it. cpp-httplib
// takes the first of two Content-Length headers, reads "abc" as 0, accepts
// any Transfer-Encoding, reads a POST, PUT or PATCH without either until the
// connection closes (into memory), reads a chunked body to an unknown path
// without bound, parses a multipart body part by part (its preamble and part
// headers escape any count), and applies Range to any answer: refused
// instead. A body announced past body_limit is refused here when the client
// waits for 100 Continue, or when it is too large to drain; handle_post
// refuses the others once it has read them.
Refusal header_refusal(const httplib::Request& req, uint64_t body_limit, bool client_waits_for_continue) {
  if (req.method != "GET" && req.method != "HEAD" && req.method != "POST" && req.method != "OPTIONS")
    return {405, "bad_request",
            "method " + req.method + " is not allowed: the node serves GET, HEAD, POST and OPTIONS (CORS)"};
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t encodings = req.get_header_value_count("Transfer-Encoding");
  if (lengths > 1) return {400, "bad_request", "more than one Content-Length header"};
  if (encodings > 1) return {400, "bad_request", "more than one Transfer-Encoding header"};
  if (lengths && encodings) return {400, "bad_request", "both Content-Length and Transfer-Encoding: send one"};
  // cpp-httplib takes the first; a proxy in front may have checked the last.
  if (req.get_header_value_count("Authorization") > 1)
    return {400, "bad_request", "more than one Authorization header"};
  const std::string length = req.get_header_value("Content-Length");
  if (lengths && (length.empty() || length.find_first_not_of("0123456789") != std::string::npos))
    return {400, "bad_request", "Content-Length is not a number of bytes: \"" + length.substr(0, 40) + "\""};
  if (encodings && ::strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") != 0)
    return {400, "bad_request",
            "Transfer-Encoding \"" + req.get_header_value("Transfer-Encoding").substr(0, 40) +
                "\" is not supported: send chunked or a Content-Length"};
  const bool has_body = encodings || length.find_first_not_of('0') != std::string::npos;
  if (has_body && !takes_a_body(req)) {
    // A mistyped path (POST /run/, a wrong base URL) is named as such.
    if (req.path != "/health" && req.path != "/metrics")
      return {404, "not_found", std::string(status_message(404)) + ": " + req.path.substr(0, 100) + " is none of them"};
    return {400, "bad_request", "a " + req.method + " " + req.path.substr(0, 100) + " request has no body here"};
  }
  if (req.method == "POST" && !lengths && !encodings)
    return {411, "bad_request", "a POST needs a Content-Length or chunked encoding"};
  if (req.has_header("Range")) return {400, "bad_request", "a Range header is not supported here"};
  if (has_body && req.is_multipart_form_data() && (encodings || !has_multipart_boundary(req)))
    return {415, "bad_request", kMultipartRefusal};
  // A multipart body is never drained past the limit: cpp-httplib's parser
  // holds what follows a boundary it cannot place.
  const uint64_t refused_unread_past =
      client_waits_for_continue || req.is_multipart_form_data() ? body_limit : drained_body_max(body_limit);
  if (lengths && (length.size() > 19 || std::stoull(length) > refused_unread_past))
    return {413, "too_large", too_large_message(body_limit)};
  return {};
}

// The Content-Length of a request that header_refusal let through, or 0.
uint64_t declared_length(const httplib::Request& req) {
  const std::string length = req.get_header_value("Content-Length");
  return length.empty() ? 0 : std::stoull(length);
}

// How much of a refused request's body to read and drop: what its one
// Content-Length announces, as much as a body past the limit is drained
// for a chunked one (its length is unknown), and nothing for any other
// (no length, two, or a head refused before its framing was read).
uint64_t body_to_drain(const httplib::Request& req, uint64_t body_limit) {
  const uint64_t most = drained_body_max(body_limit);
  const size_t lengths = req.get_header_value_count("Content-Length");
  if (lengths == 0 && req.get_header_value_count("Transfer-Encoding") == 1) return most;
  const std::string length = req.get_header_value("Content-Length");
  if (lengths != 1 || length.empty() || length.size() > 19 ||
      length.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::min<uint64_t>(std::stoull(length), most);
}

// cpp-httplib URL-decodes header values, and so does the screen; a proxy
// in front reads them as sent. Where that could make two readings of a
// request's framing or credentials (Transfer-Encoding: chunke%64), a %
// is refused. Why, or "".
std::string percent_in_framing_or_credentials(const RequestHead& head) {
  for (const auto& [name, value] : head.headers) {
    for (const char* checked : {"Content-Length", "Transfer-Encoding", "Expect", "Authorization"}) {
      if (::strcasecmp(name.c_str(), checked) == 0 && value.find('%') != std::string::npos)
        return std::string("the ") + checked +
               " header holds a %: percent-encoding is not accepted in framing or credentials headers";
    }
  }
  return "";
}

// Reads and drops the body of a refused request: closed with the body
// unread, the connection would be reset, and a client still sending would
// never read its answer. At most limit bytes; false when it could not.
bool discard_body(const httplib::Request& req, const httplib::ContentReader& reader, uint64_t limit) {
  uint64_t seen = 0;
  auto count = [&seen, limit](const char*, size_t size) { return (seen += size) <= limit; };
  if (req.is_multipart_form_data()) return reader([](const httplib::MultipartFormData&) { return true; }, count);
  return reader(count);
}

// What cpp-httplib puts in Request::remote_addr: the peer's numeric address.
std::string peer_host(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  char host[NI_MAXHOST] = "";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return {};
  return host;
}

// A head parsed by parse_request_head as cpp-httplib would hand it to a
// handler: the path without its query and the headers' values URL-decoded
// (cpp-httplib decodes both), the headers by name.
httplib::Request as_httplib_request(const RequestHead& head, int fd) {
  httplib::Request req;
  req.method = head.method;
  req.version = head.version;
  req.target = head.target;
  req.path = httplib::detail::decode_url(head.target.substr(0, head.target.find('?')), false);
  for (const auto& [name, value] : head.headers) req.headers.emplace(name, httplib::detail::decode_url(value, false));
  req.remote_addr = peer_host(fd);
  return req;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    default:
      return "Error";
  }
}

// An answer as it goes out on a connection that is closed after it.
std::string serialized(const httplib::Request& req, const httplib::Response& res) {
  std::string text = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers) text += name + ": " + value + "\r\n";
  text += "Connection: close\r\nContent-Length: " + std::to_string(res.body.size()) + "\r\n\r\n";
  if (req.method != "HEAD") text += res.body;
  return text;
}

// A browser names the page that sent a request in Origin, and in
// Sec-Fetch-Site how it relates to the node; the platform's gateway, curl and
// other programs send neither. A page from an origin the operator did not
// list may not make the node run code (a tokenless loopback listener would
// otherwise run what any web page open in the operator's browser sends).
std::string refused_origin(const httplib::Request& req, const std::vector<std::string>& allowed) {
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) return "";
    return "forbidden: a request from the web page origin \"" + origin.substr(0, 200) +
           "\" may not run code here; the operator lists allowed origins in cors.allow_origins";
  }
  const std::string site = req.get_header_value("Sec-Fetch-Site");
  if (site == "cross-site" || site == "same-site")
    return "forbidden: a browser request from another site (Sec-Fetch-Site: " + site +
           ") without an Origin may not run code here";
  return "";
}

class Node {
 public:
  Node(NodeOptions options, NodeConfig config, const Spawner& spawner)
      : options_(std::move(options)),
        config_(std::make_shared<const NodeConfig>(std::move(config))),
        started_(config_),
        audit_(std::make_shared<AuditLog>(config_->audit_log)),
        spawner_(spawner),
        admission_(config_->max_concurrent, config_->queue_depth),
        cancel_(::eventfd(0, EFD_CLOEXEC)) {
    if (!cancel_) throw SysError("eventfd", "node cancel", errno);
  }

  int serve(const sigset_t& signals);

 private:
  // The body limit of c where the servers, made at start, can hold to it:
  // a limit raised by a reload stops where they stop reading
  // (set_payload_max_length), past which a body would seem to end early.
  uint64_t body_limit_now(const NodeConfig& c) const {
    return std::min(c.body_limit, drained_body_max(started_->body_limit));
  }
  std::shared_ptr<const NodeConfig> config() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return config_;
  }
  std::shared_ptr<AuditLog> audit() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return audit_;
  }

  std::unique_ptr<httplib::Server> make_server(size_t listener_index);
  void add_cors(const httplib::Request& req, httplib::Response& res) const;
  void reply(const httplib::Request& req, httplib::Response& res, int status, const std::string& body) const;
  // A refusal, counted in the metrics by reason and written to the audit
  // log; tenant is null before (or without) authentication.
  void reject(const httplib::Request& req, httplib::Response& res, const char* reason, int status,
              const std::string& message, const TenantConfig* tenant = nullptr) const;
  void refuse(const httplib::Request& req, httplib::Response& res, const Refusal& refusal,
              const TenantConfig* tenant = nullptr) const;
  void audit_refusal(const httplib::Request& req, const TenantConfig* tenant, int status, const char* reason,
                     const std::string& message) const;
  void refused_by_the_listener(const char* reason, int status, int fd, const std::string& answer) const;
  void refuse_as_the_platform(const httplib::Request& req, httplib::Response& res, const TenantConfig* tenant,
                              const std::string& message, const std::string& answer) const;
  void refuse_unaudited(const httplib::Request& req, httplib::Response& res, AuditLog& log,
                        const TenantConfig* tenant) const;
  Refusal refusal_before_the_body(const httplib::Request& req, const NodeConfig& cfg, size_t li,
                                  const TenantConfig*& tenant) const;
  ArrivalWatch::Screened screen_head(std::string_view head, int fd, size_t li);
  const TenantConfig* authenticate(const NodeConfig& cfg, const ListenerConfig& l, const httplib::Request& req,
                                   std::string& why) const;
  void handle_post(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                   size_t listener_index, bool native);
  void handle_run(const httplib::Request& req, const std::string& body, httplib::Response& res, const NodeConfig& cfg,
                  const TenantConfig& tenant, size_t listener_index, bool native);
  void finish_run(AuditContext ctx, const TenantConfig& tenant, const Job& job, const JobResult& result, double seconds,
                  const char* killed_by, size_t answer_bytes) const;
  // failure: why tenant's run got no sandbox, or nullopt when it got one.
  void note_sandbox_health(const TenantConfig& tenant, const std::optional<std::string>& failure) const;
  const char* who_killed(const JobResult& result, int client) const;
  void reload();
  void configure_pool(const NodeConfig& c) const;
  void drain(const char* cause);

  NodeOptions options_;
  mutable std::mutex state_mutex_;
  std::shared_ptr<const NodeConfig> config_;
  const std::shared_ptr<const NodeConfig> started_;  // what the servers were made with
  std::shared_ptr<AuditLog> audit_;
  const Spawner& spawner_;
  Admission admission_;
  TenantShares tenant_shares_;
  // Per tenant, answers being written: a client that does not read them
  // holds a request thread each (unread_answers_refusal bounds them).
  TenantShares answering_;

  // A tenant's requests in and answers being written together hold request
  // threads; one answer past max_requests may still be on its way out when
  // an honest client sends its next request, so a tenant holds at most
  // max_requests + 1 threads. {} (status 0) when the request may go on.
  Refusal unread_answers_refusal(const TenantConfig& tenant) const {
    const uint32_t answering = answering_.held(tenant.name);
    const uint32_t in = tenant_shares_.held(tenant.name);
    if (!tenant.max_requests || !answering || in + answering <= tenant.max_requests) return {};
    return {429, "tenant_limit",
            "too many requests: tenant " + tenant.name + " has " + std::to_string(in) + " requests in and " +
                std::to_string(answering) + " answers it has not finished reading (more than its max_requests " +
                std::to_string(tenant.max_requests) + " together); retry once they are read"};
  }
  mutable Metrics metrics_;
  mutable SandboxHealth health_;
  UniqueFd cancel_;
  std::vector<std::unique_ptr<httplib::Server>> servers_;
  std::vector<std::thread> threads_;
};

void Node::add_cors(const httplib::Request& req, httplib::Response& res) const {
  // Only origins the operator listed: the platform's server answers `*`,
  // which lets any web page drive the sandbox from a user's browser.
  if (!req.has_header("Origin")) return;
  const std::string origin = req.get_header_value("Origin");
  auto cfg = config();
  for (const auto& allowed : cfg->cors_origins) {
    if (allowed == origin) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      return;
    }
  }
}

void Node::reply(const httplib::Request& req, httplib::Response& res, int status, const std::string& body) const {
  res.status = status;
  res.set_content(body, "application/json");
  add_cors(req, res);
}

namespace {

constexpr std::string_view kBearer = "Bearer ";

// The scheme's case does not matter (RFC 9110); clients send "bearer" too.
bool is_bearer(const std::string& authorization) {
  return authorization.size() >= kBearer.size() &&
         ::strncasecmp(authorization.data(), kBearer.data(), kBearer.size()) == 0;
}

// The tenant whose token the request's Authorization header carries, if any.
const TenantConfig* tenant_of_bearer(const NodeConfig& cfg, const httplib::Request& req) {
  const std::string value = req.get_header_value("Authorization");
  return is_bearer(value) ? cfg.tenant_for_token(value.substr(kBearer.size())) : nullptr;
}

// Whether the request may read /metrics: any, unless the config names a
// token for it.
bool metrics_token_matches(const NodeConfig& cfg, const httplib::Request& req) {
  if (cfg.metrics_token.empty()) return true;
  const std::string value = req.get_header_value("Authorization");
  return is_bearer(value) && constant_time_equal(value.substr(kBearer.size()), cfg.metrics_token);
}

}  // namespace

void Node::reject(const httplib::Request& req, httplib::Response& res, const char* reason, int status,
                  const std::string& message, const TenantConfig* tenant) const {
  metrics_.rejected(reason);
  audit_refusal(req, tenant, status, reason, message);
  reply(req, res, status, error_body(message));
}

void Node::refuse(const httplib::Request& req, httplib::Response& res, const Refusal& refusal,
                  const TenantConfig* tenant) const {
  if (refusal.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  if (refusal.status == 405) res.set_header("Allow", "GET, HEAD, POST, OPTIONS");
  if (refusal.status == 429) res.set_header("Retry-After", "1");
  reject(req, res, refusal.reason, refusal.status, refusal.message, tenant);
}

void Node::audit_refusal(const httplib::Request& req, const TenantConfig* tenant, int status, const char* reason,
                         const std::string& message) const {
  RefusalContext ctx;
  ctx.client = req.remote_addr;
  ctx.method = req.method;
  ctx.path = req.path;
  // Refused before it was authenticated (a body too large, an origin not
  // allowed): a valid token still says whose credentials were used.
  const auto cfg = config();
  const TenantConfig* by_token = tenant_of_bearer(*cfg, req);
  if (!tenant) tenant = by_token;
  if (tenant) ctx.tenant = tenant->name;
  ctx.by_token = tenant && tenant == by_token;
  ctx.status = status;
  ctx.reason = reason;
  ctx.message = message;
  audit()->refused(refusal_record(ctx));
}

// A request not run that the platform's servers answer with a 200 (an
// unknown language, empty code): answered so, and counted and recorded as
// the refusal it is.
void Node::refuse_as_the_platform(const httplib::Request& req, httplib::Response& res, const TenantConfig* tenant,
                                  const std::string& message, const std::string& answer) const {
  metrics_.rejected("bad_request");
  audit_refusal(req, tenant, 200, "bad_request", message);
  reply(req, res, 200, answer);
}

// A run refused because its audit record could not be written.
void Node::refuse_unaudited(const httplib::Request& req, httplib::Response& res, AuditLog& log,
                            const TenantConfig* tenant) const {
  reject(req, res, "audit_unavailable", 503,
         "the node's audit log cannot be written (" + log.failure() + "): no run starts until it can", tenant);
}

// A connection the arrival watch answered itself, before any head the
// node could read: counted, and written to the audit log by what it was
// told (no method or path is known).
void Node::refused_by_the_listener(const char* reason, int status, int fd, const std::string& answer) const {
  metrics_.rejected(reason);
  RefusalContext ctx;
  ctx.client = peer_host(fd);
  ctx.status = status;
  ctx.reason = reason;
  // What the client was told: the answer's body, {"return": null, "error": ...}.
  const size_t body = answer.find("\r\n\r\n");
  const json told = body == std::string::npos ? json() : json::parse(answer.substr(body + 4), nullptr, false);
  ctx.message = told.is_object() && told.contains("error") && told["error"].is_string()
                    ? told["error"].get<std::string>()
                    : "malformed request head";
  audit()->refused(refusal_record(ctx));
}

// Who is asking is decided from the headers, before a byte of the body is
// held: an anonymous client cannot make the node buffer bodies (a refused
// body is read and dropped, never kept). Asked again before a client that
// waits for 100 Continue is told to send.
Refusal Node::refusal_before_the_body(const httplib::Request& req, const NodeConfig& cfg, size_t li,
                                      const TenantConfig*& tenant) const {
  if (std::string why = refused_origin(req, cfg.cors_origins); !why.empty()) return {403, "forbidden", why};
  std::string why;
  tenant = authenticate(cfg, cfg.listeners[li], req, why);
  if (!tenant) return {401, "unauthorized", why};
  // cpp-httplib reads such a body only part by part, which no request of
  // this API is.
  if (req.is_multipart_form_data()) return {415, "bad_request", kMultipartRefusal};
  return {};
}

// Made by the arrival watch on each head before a request thread is given
// the connection: every refusal a thread would make before reading the
// body, so that a refused client, however slowly it sends its body, holds
// no thread. The threads ask again (a reload may come in between). A run
// request let through holds its tenant's share from here, so that a
// tenant's bodies still arriving count against its max_requests too.
ArrivalWatch::Screened Node::screen_head(std::string_view head, int fd, size_t li) {
  auto cfg = config();
  const uint64_t limit = body_limit_now(*cfg);
  RequestHead parsed;
  const std::string malformed = parse_request_head(head, parsed);
  httplib::Request req = as_httplib_request(parsed, fd);
  const TenantConfig* tenant = nullptr;
  Refusal refusal;
  if (!malformed.empty()) {
    refusal = {400, "bad_request", malformed};
  } else if (head.find("\r\n") + 2 > kMaxRequestLine) {
    refusal = {
        414, "bad_request",
        std::string(status_message(414)) + ": the request line is over " + std::to_string(kMaxRequestLine) + " bytes"};
  } else if (std::string why = percent_in_framing_or_credentials(parsed); !why.empty()) {
    refusal = {400, "bad_request", why};
  } else {
    // cpp-httplib asks its 100-continue handler exactly then.
    refusal = header_refusal(req, limit, req.get_header_value("Expect") == "100-continue");
    if (!refusal.status && declared_length(req) > limit) refusal = {413, "too_large", too_large_message(limit)};
    if (!refusal.status && takes_a_body(req)) refusal = refusal_before_the_body(req, *cfg, li, tenant);
  }
  ArrivalWatch::Screened screened;
  if (!refusal.status && tenant) refusal = unread_answers_refusal(*tenant);
  if (!refusal.status && tenant) {
    if (tenant_shares_.try_take(tenant->name, tenant->max_requests)) {
      screened.held = std::make_shared<TenantShare>(tenant_shares_, tenant->name);
      screened.holder = tenant->name;
    } else
      refusal = tenant_limit_refusal(*tenant);
  }
  if (!refusal.status) return screened;
  httplib::Response res;
  refuse(req, res, refusal, tenant);
  screened.refusal = ArrivalWatch::HeadRefusal{serialized(req, res), head.size() + body_to_drain(req, limit)};
  return screened;
}

const TenantConfig* Node::authenticate(const NodeConfig& cfg, const ListenerConfig& l, const httplib::Request& req,
                                       std::string& why) const {
  if (!req.has_header("Authorization")) {
    const TenantConfig* t = cfg.anonymous_tenant(l);
    if (!t) why = "unauthorized: send Authorization: Bearer <token>";
    return t;
  }
  // Empty credentials are refused, never taken as none: a client whose
  // token is unset must not run as a listener's anonymous tenant.
  const std::string value = req.get_header_value("Authorization");
  if (value.find_first_not_of(" \t") == std::string::npos) {
    why = "unauthorized: the Authorization header is empty; send Authorization: Bearer <token>";
    return nullptr;
  }
  // "Bearer " arrives as "Bearer": the header's trailing space is not its.
  const bool scheme_only =
      value.size() + 1 == kBearer.size() && ::strncasecmp(value.data(), kBearer.data(), value.size()) == 0;
  if (scheme_only || (is_bearer(value) && value.find_first_not_of(" \t", kBearer.size()) == std::string::npos)) {
    why = "unauthorized: the Bearer token is empty";
    return nullptr;
  }
  if (!is_bearer(value)) {
    why = "unauthorized: only Authorization: Bearer <token> is accepted";
    return nullptr;
  }
  const TenantConfig* t = tenant_of_bearer(cfg, req);
  if (!t) why = "unauthorized: unknown token";
  return t;
}

// A run ends killed when the node cancels it (at the end of a drain's grace
// period) or its client goes away; which one, for the audit log.
const char* Node::who_killed(const JobResult& result, int client) const {
  // A seccomp kill (SIGSYS) or the code's own signal is no one's cancel.
  if (result.value("status", "") != "killed" || result.value("signal", json(nullptr)) != json(SIGKILL)) return nullptr;
  pollfd node{cancel_.get(), POLLIN, 0};
  if (::poll(&node, 1, 0) > 0 && (node.revents & POLLIN)) return "node_stopping";
  if (client_went_away(client)) return "client_closed";
  return nullptr;
}

// Who ran what, for the audit log's records of a run.
AuditContext audit_context(const std::string& api, const TenantConfig& tenant, const httplib::Request& req,
                           const Job& job) {
  AuditContext ctx;
  ctx.run_id = job.run_id;
  ctx.tenant = tenant.name;
  // authenticate() takes a request with an Authorization header only by
  // its token; without one, the tenant is the listener's anonymous one.
  ctx.by_token = req.has_header("Authorization");
  ctx.api = api;
  ctx.client = req.remote_addr;
  ctx.code_sha256 = sha256_hex(job.request.exec.code);
  ctx.profile_sha256 = tenant.profile_sha256;  // the tenant the job was made from
  ctx.rootfs = job.rootfs_tree;
  ctx.profile = job.profile_name;
  ctx.language = to_string(job.request.exec.language);
  ctx.input_bytes = job.request.exec.inputs.dump().size();
  return ctx;
}

void Node::finish_run(AuditContext ctx, const TenantConfig& tenant, const Job& job, const JobResult& result,
                      double seconds, const char* killed_by, size_t answer_bytes) const {
  ctx.duration_s = seconds;
  ctx.answer_bytes = answer_bytes;
  ctx.killed_by = killed_by;
  json record = audit_record(ctx, result);
  auto log = audit();
  log->write(record);
  for (const auto& line : egress_audit_records(ctx, result)) log->write(line);
  metrics_.egress_finished(tenant.name, result.value("network", json(nullptr)));
  const std::string status = result.value("status", "error");
  metrics_.run_finished(tenant.name, to_string(job.request.exec.language), status, seconds);
  spdlog::info("run {} tenant={} profile={} language={} status={}{} duration_ms={}", job.run_id, tenant.name,
               tenant.profile.name, to_string(job.request.exec.language), status,
               killed_by ? std::string(" killed_by=") + killed_by : std::string(), record["duration_ms"].dump());
  if (result.value("error_type", json(nullptr)) != "sandbox") return note_sandbox_health(tenant, std::nullopt);
  const json& error = result.value("error", json(""));
  spdlog::error("run {}: {}", job.run_id, error.dump());
  note_sandbox_health(tenant, error.is_string() ? error.get<std::string>() : error.dump());
}

void Node::note_sandbox_health(const TenantConfig& tenant, const std::optional<std::string>& failure) const {
  switch (health_.run_finished(!failure)) {
    case SandboxHealth::Change::kDegraded:  // this run's failure made the count
      spdlog::error(
          "the last {} runs got no sandbox (the last: tenant {}: {}): /health answers 503 degraded until a run gets "
          "one, or for {} s after the last such run",
          SandboxHealth::kFailuresInARow, tenant.name, failure.value_or(""), SandboxHealth::kHold.count());
      break;
    case SandboxHealth::Change::kRecovered:
      spdlog::info("runs get sandboxes again: /health answers ok");
      break;
    case SandboxHealth::Change::kNone:
      break;
  }
}

void Node::handle_post(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                       size_t li, bool native) {
  auto cfg = config();
  const uint64_t limit = body_limit_now(*cfg);
  // After a body is read, whether the watch cut it at request_timeout (it
  // has then answered 408 and counted it) is asked before anything else.
  if (declared_length(req) > limit) {
    discard_body(req, reader, drained_body_max(limit));
    if (!request_arrived()) return;
    return reject(req, res, "too_large", 413, too_large_message(limit));
  }
  const TenantConfig* tenant = nullptr;
  if (const Refusal refusal = refusal_before_the_body(req, *cfg, li, tenant); refusal.status) {
    discard_body(req, reader, limit);
    if (!request_arrived()) return;
    // Its read cut at a framing line: what the connection answers is that.
    if (chunked_framing_too_long()) return reject(req, res, "bad_request", 400, framing_too_long_message(), tenant);
    return refuse(req, res, refusal, tenant);
  }
  // Read here rather than by cpp-httplib, which would parse a form-encoded
  // body (curl -d sends one) and refuse it past 8 KiB.
  std::string body;
  uint64_t seen = 0;
  const bool complete = reader([&](const char* data, size_t size) {
    seen += size;
    if (seen <= limit) {
      body.append(data, size);
      return true;
    }
    std::string().swap(body);  // a chunked body past the limit: dropped as it comes
    return seen <= drained_body_max(limit);
  });
  if (!request_arrived()) return;
  if (chunked_framing_too_long()) return reject(req, res, "bad_request", 400, framing_too_long_message(), tenant);
  if (const char* why = chunked_framing_malformed()) return reject(req, res, "bad_request", 400, why, tenant);
  if (seen > limit) return reject(req, res, "too_large", 413, too_large_message(limit), tenant);
  if (!complete) {
    // The client went away or stalled mid-body: what arrived is not the
    // request it meant, and is never run.
    return reject(req, res, "bad_request", 400,
                  "the request body ended early (" + std::to_string(body.size()) +
                      " bytes arrived before the connection closed or timed out)",
                  tenant);
  }
  handle_run(req, body, res, *cfg, *tenant, li, native);
}

void Node::handle_run(const httplib::Request& req, const std::string& body, httplib::Response& res,
                      const NodeConfig& cfg, const TenantConfig& tenant_ref, size_t li, bool native) {
  const TenantConfig* tenant = &tenant_ref;
  if (t_shedding) {
    // Answered after the body was read: closing a socket with unread data
    // would reset the connection before the client sees the 429.
    res.set_header("Connection", "close");
    return refuse(req, res, {429, "overload", kOverloadMessage}, tenant);
  }
  const ListenerConfig& listener = cfg.listeners[li];
  DecodedRequest decoded = decode_run_request(body, listener.language, native);
  // The platform answers an unknown language and empty code with 200 and
  // shapes of their own; /v1/runs, whose 200 is a full result, with a 400.
  if (!decoded.request) {
    if (decoded.unsupported_language && !native)
      return refuse_as_the_platform(req, res, tenant, decoded.error, unsupported_language_answer(decoded.error));
    return reject(req, res, "bad_request", 400, decoded.error, tenant);
  }
  if (decoded.request->exec.code.find_first_not_of(" \t\r\n") == std::string::npos) {
    if (native) return reject(req, res, "bad_request", 400, "No code provided.", tenant);
    return refuse_as_the_platform(req, res, tenant, "No code provided.", error_body("No code provided."));
  }
  // No run without its record: a log the disk no longer takes stops runs
  // (a quick look here; its run_started line below decides).
  if (auto log = audit(); !log->writable()) return refuse_unaudited(req, res, *log, tenant);
  // Taken on the head (screen_head) unless the watch did not see it.
  std::optional<TenantShare> share;
  // (A reload between the head and here may have moved the token to
  // another tenant, whose share is then taken here.)
  if (!held_since_the_head(tenant->name)) {
    if (Refusal unread = unread_answers_refusal(*tenant); unread.status) return refuse(req, res, unread, tenant);
    if (!tenant_shares_.try_take(tenant->name, tenant->max_requests))
      return refuse(req, res, tenant_limit_refusal(*tenant), tenant);
    share.emplace(tenant_shares_, tenant->name);
  }
  switch (admission_.acquire()) {
    case Admission::Verdict::kAdmitted:
      break;
    case Admission::Verdict::kFull:
      res.set_header("Retry-After", "1");
      return reject(req, res, "overload", 429,
                    "too many requests: all " + std::to_string(cfg.max_concurrent) +
                        " sandboxes are busy and the queue is full; retry later",
                    tenant);
    case Admission::Verdict::kClosed:
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      return reject(req, res, "shutting_down", 503, "the node is shutting down; retry on another node", tenant);
  }
  AdmissionSlot slot(admission_);
  // Between the spawner's death and the drain it starts, a run would only
  // fail (and be recorded as run).
  if (!spawner_.alive()) {
    res.set_header("Retry-After", "1");
    res.set_header("Connection", "close");
    return reject(req, res, "shutting_down", 503,
                  "the node is shutting down (its spawner has died); retry on another node", tenant);
  }
  const int client = served_socket();
  if (client_went_away(client))
    return reject(req, res, "client_closed", 499,
                  "the client closed its connection while its request waited for a sandbox: not run", tenant);
  const UniqueFd run_cancel = cancel_on_node_or_client(cancel_.get(), client);
  Job job{new_run_id(),
          tenant->profile.name,
          tenant->profile_yaml,
          std::move(*decoded.request),
          rootfs_path(tenant->profile),
          current_rootfs_tree(rootfs_path(tenant->profile))};
  res.set_header("X-Nsbox-Run-Id", job.run_id);
  const AuditContext ctx = audit_context(native ? "v1" : "run", *tenant, req, job);
  if (auto log = audit(); !log->write(run_started_record(ctx))) {
    res.headers.erase("X-Nsbox-Run-Id");
    return refuse_unaudited(req, res, *log, tenant);
  }
  const auto start = Clock::now();
  JobResult result;
  try {
    result = spawner_.run(job, run_cancel ? run_cancel.get() : cancel_.get(),
                          AnswerWait{tenant->profile.limits.wall_time, cfg.answer_grace});
  } catch (const std::exception& e) {
    result = json{{"return", nullptr},
                  {"error", std::string("The sandbox could not be started: ") + e.what()},
                  {"status", "error"},
                  {"error_type", "sandbox"}};
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Built before the audit record, which says how much of it there is.
  // A run that got no sandbox is the node's failure, not the code's: a 500
  // on both APIs, so that a gateway retries it elsewhere (the platform's
  // 200 is for user errors and timeouts).
  const int status = result.value("error_type", json(nullptr)) == "sandbox" ? 500 : 200;
  std::string answer;
  if (native) {
    result["run_id"] = job.run_id;
    result["tenant"] = tenant->name;
    answer = result.dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    answer = platform_answer(result.value("return", json(nullptr)), result.value("error", json(nullptr)));
  }
  finish_run(ctx, *tenant, job, result, seconds, who_killed(result, client), answer.size());
  reply(req, res, status, answer);
}

std::unique_ptr<httplib::Server> Node::make_server(size_t li) {
  auto cfg = config();
  auto svr = std::make_unique<httplib::Server>();
  const size_t threads = request_threads(*cfg);
  const ArrivalWatch::Limits arrival{.request_timeout = cfg->request_timeout, .idle_timeout = cfg->client_timeout};
  svr->new_task_queue = [this, threads, arrival, li] {
    return new BoundedTaskQueue(
        threads, threads * kPendingPerThread, arrival,
        [this](const char* reason, int status, int fd, const std::string& answer) {
          refused_by_the_listener(reason, status, fd, answer);
        },
        [this, li](std::string_view head, int fd) { return screen_head(head, fd, li); });
  };
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(cfg->client_timeout);
  svr->set_read_timeout(timeout.count() / 1000000, timeout.count() % 1000000);
  svr->set_write_timeout(timeout.count() / 1000000, timeout.count() % 1000000);
  svr->set_keep_alive_timeout(kKeepAliveSeconds);
  // Headers and body are separate writes: without this, Nagle and the
  // client's delayed ACK add 40 ms to every answer on a kept-alive connection.
  svr->set_tcp_nodelay(true);
  // handle_post holds a body to the limit; up to this, one past it is drained.
  svr->set_payload_max_length(drained_body_max(cfg->body_limit));
  // One request per connection. cpp-httplib 0.11 reads each request of a
  // connection through a fresh buffer and keeps the connection whatever an
  // answer's Connection header says: a body left unread (a refusal, a HEAD,
  // a 414) would be read as the next request where a proxy in front saw
  // none (request smuggling), and a pipelined request would be lost.
  svr->set_keep_alive_max_count(1);
  // Refused on its head, a request's body is never read; with Expect:
  // 100-continue the client is told before it sends it.
  svr->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Before any of a chunked body is read (header_refusal lets through
    // no coding but chunked).
    if (req.has_header("Transfer-Encoding")) guard_chunked_framing();
    Refusal refusal = header_refusal(req, body_limit_now(*config()), false);
    // What of the body came with the head has been read already, and bad
    // framing in it would have cpp-httplib wait for bytes never sent.
    if (const char* why = chunked_framing_malformed(); why && !refusal.status) refusal = {400, "bad_request", why};
    if (!refusal.status) return httplib::Server::HandlerResponse::Unhandled;
    refuse(req, res, refusal);
    return httplib::Server::HandlerResponse::Handled;
  });
  svr->set_expect_100_continue_handler([this, li](const httplib::Request& req, httplib::Response& res) {
    // Whatever will refuse the body is said before the client sends it.
    auto now = config();
    Refusal refusal = header_refusal(req, body_limit_now(*now), true);
    const TenantConfig* tenant = nullptr;
    if (!refusal.status && takes_a_body(req)) refusal = refusal_before_the_body(req, *now, li, tenant);
    if (!refusal.status && t_shedding) refusal = {429, "overload", kOverloadMessage};
    if (!refusal.status) return 100;
    refuse(req, res, refusal, tenant);
    return refusal.status;
  });
  // Every answer is written after this: from here the watch may no longer
  // cut the connection, so its 408 and an answer never share the socket.
  // The tenant's share taken on the head is given back here too, before
  // the answer goes out (not before a 100 Continue: the body is yet to come),
  // and the answer is counted as the tenant's until it is written.
  svr->set_post_routing_handler([this](const httplib::Request&, httplib::Response&) {
    (void)request_arrived();
    answer_under_deadline();
    hold_while_answering([this](const std::string& tenant) -> std::shared_ptr<void> {
      answering_.try_take(tenant, 0);
      return std::make_shared<TenantShare>(answering_, tenant);
    });
  });
  svr->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own answer
    if (res.status == 413) {        // a Content-Length past what the servers read
      return reject(req, res, "too_large", 413, too_large_message(body_limit_now(*config())));
    }
    // GET /run: the path is right, the method is not.
    if (res.status == 404 && (req.path == "/run" || req.path == "/v1/runs")) {
      res.set_header("Allow", "POST");
      return reject(req, res, "bad_request", 405, req.method + " " + req.path + " is not served: send a POST");
    }
    if (res.status == 404) return reject(req, res, "not_found", 404, status_message(404));
    reply(req, res, res.status, error_body(status_message(res.status)));
  });
  svr->set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", req.method, req.path, what);
    reject(req, res, "internal_error", 500, "internal error: " + what);
  });
  svr->Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    if (!spawner_.alive()) return reply(req, res, 503, R"({"status": "down", "reason": "the spawner has died"})");
    if (auto log = audit(); !log->writable()) {
      json j{{"status", "degraded"}, {"reason", "the audit log cannot be written: " + log->failure()}};
      return reply(req, res, 503, dump_platform_json(j));  // spaced as the other answers
    }
    if (auto why = health_.degraded()) {
      return reply(req, res, 503, dump_platform_json(json{{"status", "degraded"}, {"reason", *why}}));
    }
    reply(req, res, 200, "{\"status\": \"ok\"}");
  });
  svr->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    auto cfg_now = config();
    if (!metrics_token_matches(*cfg_now, req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      return reject(req, res, "unauthorized", 401,
                    "unauthorized: /metrics needs Authorization: Bearer <metrics token>");
    }
    const PoolStats& ps = spawner_.pool_stats();
    Metrics::Gauges g;
    g.running = admission_.running();
    g.queued = admission_.queued();
    g.max_running = cfg_now->max_concurrent;
    g.max_queued = cfg_now->queue_depth;
    g.audit_records_lost = AuditLog::records_lost_in_process();
    g.answers_reset = answers_reset_in_process();
    g.sandbox_failures = health_.failures_total();
    g.pool = {.idle = ps.idle.load(),
              .starting = ps.starting.load(),
              .idle_memory_bytes = ps.idle_memory_bytes.load(),
              .hits = ps.hits.load(),
              .waits = ps.waits.load(),
              .misses = ps.misses.load(),
              .refills = ps.refills.load(),
              .refill_ms_total = ps.refill_ms_total.load(),
              .retired = ps.retired.load(),
              .fork_servers = ps.fork_servers.load()};
    res.set_content(metrics_.render(g), "text/plain; version=0.0.4");
  });
  svr->Post("/run", [this, li](const httplib::Request& req, httplib::Response& res,
                               const httplib::ContentReader& reader) { handle_post(req, res, reader, li, false); });
  svr->Post("/v1/runs", [this, li](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) { handle_post(req, res, reader, li, true); });
  svr->Options(".*", [this](const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
    res.set_header("Access-Control-Max-Age", "600");
    add_cors(req, res);
  });
  return svr;
}

// The servers listen where the node started, and a reload cannot move
// them; what each listener runs (its language, its anonymous tenant) may
// change. Listeners are matched by address, so a reorder is no change and
// next's come back in the servers' order. A config that adds or drops a
// listener is refused whole (the problem is returned): applying the rest
// would keep serving what the operator meant to remove, a listener's
// anonymous tenant say, while the audit log recorded the reload as applied.
std::string take_listeners_in_place(const NodeConfig& running, NodeConfig& next) {
  std::vector<ListenerConfig> ordered;
  std::vector<std::string> changes;
  auto at = [](const std::vector<ListenerConfig>& in, const std::string& address) {
    return std::find_if(in.begin(), in.end(), [&](const ListenerConfig& l) { return l.address() == address; });
  };
  for (const auto& l : running.listeners) {
    auto found = at(next.listeners, l.address());
    if (found == next.listeners.end()) {
      changes.push_back("drops " + l.address());
    } else {
      ordered.push_back(*found);
    }
  }
  for (const auto& l : next.listeners) {
    if (at(running.listeners, l.address()) == running.listeners.end()) changes.push_back("adds " + l.address());
  }
  if (!changes.empty()) {
    std::string joined;
    for (const auto& c : changes) joined += (joined.empty() ? "" : ", ") + c;
    return "the config " + joined + ": listener addresses change only at a restart of the node";
  }
  next.listeners = std::move(ordered);
  return {};
}

namespace {

// Every tenant's profile, warm in both languages.
std::vector<PoolEntry> pool_entries(const NodeConfig& c) {
  std::vector<PoolEntry> out;
  if (c.pool_size == 0) return out;
  for (const auto& t : c.tenants) {
    for (Language language : {Language::kPython, Language::kJavaScript}) {
      PoolEntry e;
      e.rootfs = rootfs_path(t.profile);
      e.rootfs_tree = current_rootfs_tree(e.rootfs);
      e.key = pool_key(t.profile_yaml, language, e.rootfs_tree);
      e.profile_name = t.profile.name;
      e.profile_yaml = t.profile_yaml;
      e.language = language;
      e.size = c.pool_size;
      e.fork_server = forks(t.profile, language);
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace

// What a config lets run, and who may, for the audit log: its source, each
// listener with the language it pins and the tenant anonymous requests to
// it run as, and each tenant with a fingerprint of its token (so that a
// token's change is on record, never the token), its share and its
// profile with that profile's digest (a reload may change a profile and
// keep its name).
json config_record(const char* event, const NodeConfig& c) {
  json j = event_record(event);
  j["pid"] = ::getpid();
  char host[256] = {};
  j["hostname"] = ::gethostname(host, sizeof host - 1) == 0 ? json(host) : json(nullptr);
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(c.source, ec);
  j["config"] = c.source.empty() || c.source.front() == '<' || ec ? c.source : absolute.lexically_normal().string();
  json tenants = json::array();
  for (const auto& t : c.tenants)
    tenants.push_back({{"name", t.name},
                       {"token_sha256", t.token.empty() ? json(nullptr) : json(sha256_hex(t.token).substr(0, 16))},
                       {"max_requests", t.max_requests},
                       {"profile", t.profile.name},
                       {"profile_sha256", t.profile_sha256}});
  j["tenants"] = std::move(tenants);
  json listeners = json::array();
  for (const auto& l : c.listeners) {
    const std::string& anonymous = l.tenant.empty() ? c.default_tenant : l.tenant;
    listeners.push_back({{"address", l.address()},
                         {"language", l.language ? json(to_string(*l.language)) : json(nullptr)},
                         {"anonymous_tenant", anonymous.empty() ? json(nullptr) : json(anonymous)}});
  }
  j["listeners"] = std::move(listeners);
  j["metrics_token"] = !c.metrics_token.empty();
  return j;
}

void Node::configure_pool(const NodeConfig& c) const {
  try {
    spawner_.configure_pool(pool_entries(c), c.pool_memory);
  } catch (const std::exception& e) {
    spdlog::error("warm pool not configured: {}", e.what());
  }
}

// The HTTP servers are made once, at start: what they were made with stays
// until a restart, whatever a reload says.
void warn_of_server_settings_kept(const NodeConfig& started, const NodeConfig& next) {
  if (next.client_timeout != started.client_timeout)
    spdlog::warn("reload: limits.client_timeout changed; it takes effect at the next restart");
  if (next.request_timeout != started.request_timeout)
    spdlog::warn("reload: limits.request_timeout changed; it takes effect at the next restart");
  if (next.body_limit > drained_body_max(started.body_limit))
    spdlog::warn(
        "reload: limits.body_limit rose past the {} bytes the servers read; bodies larger than that are refused "
        "until the next restart",
        drained_body_max(started.body_limit));
  if (request_threads(next) > request_threads(started))
    spdlog::warn(
        "reload: max_concurrent + queue_depth rose; each listener keeps its {} request threads until the next "
        "restart",
        request_threads(started));
}

void Node::reload() {
  const std::string what = options_.config_path.empty() ? "the built-in config" : options_.config_path;
  try {
    auto next = std::make_shared<NodeConfig>(load_node_config(options_));
    auto current = config();
    if (std::string problem = take_listeners_in_place(*started_, *next); !problem.empty())
      throw std::runtime_error(problem);
    if (next->cgroup_parent != current->cgroup_parent)
      spdlog::warn("reload: cgroup_parent changed; it takes effect at the next restart");
    warn_of_server_settings_kept(*started_, *next);
    // The audit trail has no gap a reload made: turning it off takes a restart.
    if (!current->audit_log.empty() && next->audit_log.empty())
      throw std::runtime_error(
          "audit_log was removed; a reload does not stop the audit log (restart the node "
          "without it to run unaudited)");
    auto audit_log = std::make_shared<AuditLog>(next->audit_log);  // reopened: rotation
    if (next->audit_log != current->audit_log) {
      json moved = event_record("audit_log_moved");
      moved["to"] = next->audit_log;
      audit()->write(moved);
    }
    audit_log->take_lost_from(*audit());  // what the old file did not take is said in the new one
    admission_.resize(next->max_concurrent, next->queue_depth);
    configure_pool(*next);  // sandboxes of changed profiles are retired
    spdlog::set_level(spdlog::level::from_str(next->log_level));
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      config_ = next;
      audit_ = audit_log;
    }
    json applied = config_record("reload", *next);
    applied["outcome"] = "applied";
    audit()->write(applied);
    spdlog::info("reloaded {}: {} tenants, max_concurrent {}, queue_depth {}", what, next->tenants.size(),
                 next->max_concurrent, next->queue_depth);
  } catch (const std::exception& e) {
    spdlog::error("reload of {} refused, the running config stays: {}", what, e.what());
    json refused = event_record("reload");
    refused["outcome"] = "refused";
    refused["error"] = std::string(e.what()).substr(0, 1024);
    audit()->write(refused);
  }
}

void Node::drain(const char* cause) {
  auto cfg = config();
  spdlog::info("stopping: no new runs; {} running get up to {}", admission_.running(),
               format_duration(cfg->grace_period));
  notify_service_manager("STOPPING=1\nSTATUS=stopping (" + std::string(cause) +
                         "): " + std::to_string(admission_.running()) + " runs get up to " +
                         format_duration(cfg->grace_period) + " to finish");
  json stopping = event_record("node_stopping");
  stopping["cause"] = cause;
  stopping["running"] = admission_.running();
  stopping["queued"] = admission_.queued();
  audit()->write(stopping);
  admission_.close();
  for (auto& s : servers_) s->stop();
  if (!admission_.wait_idle(Clock::now() + cfg->grace_period)) {
    spdlog::warn("grace period over: killing {} sandboxes", admission_.running());
    uint64_t one = 1;
    if (::write(cancel_.get(), &one, sizeof one) != sizeof one) spdlog::error("cancel runs: {}", std::strerror(errno));
  }
  for (auto& t : threads_) t.join();
  audit()->write(event_record("node_stopped"));
}

int Node::serve(const sigset_t& signals) {
  configure_pool(*config());
  auto cfg = config();
  for (size_t i = 0; i < cfg->listeners.size(); ++i) {
    auto svr = make_server(i);
    const auto& l = cfg->listeners[i];
    int listen_fd = -1;
    svr->set_socket_options([&listen_fd](int fd) {
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      // Accepted once its first bytes are in, a connection usually has its
      // head whole already: the arrival watch then hands it on at once
      // rather than after a look from its own thread.
      ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof one);
      listen_fd = fd;
    });
    errno = 0;
    if (!svr->bind_to_port(l.host, l.port)) {
      spdlog::critical("listen {}: {}", l.address(), errno ? std::strerror(errno) : "cannot bind");
      for (auto& s : servers_) s->stop();
      for (auto& t : threads_) t.join();
      return 1;
    }
    // cpp-httplib listens with a backlog of 5: a burst of clients would
    // overflow it and see resets. A second listen() only raises the backlog.
    if (listen_fd >= 0 && ::listen(listen_fd, kListenBacklog) != 0)
      spdlog::warn("listen {}: raising the backlog: {}", l.address(), std::strerror(errno));
    httplib::Server* raw = svr.get();
    servers_.push_back(std::move(svr));
    threads_.emplace_back([raw] { raw->listen_after_bind(); });
    // cpp-httplib's stop() is a no-op until the listen loop runs: wait for
    // it, so a SIGTERM right after start (or a later bind failure) stops it.
    for (int w = 0; w < 5000 && !raw->is_running(); ++w) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    spdlog::info("listening on http://{}{}", l.address(),
                 l.language ? std::string(" (") + to_string(*l.language) + " only)" : "");
  }
  spdlog::info("node ready: config {}, {} tenants, max_concurrent {}, queue_depth {}", cfg->source, cfg->tenants.size(),
               cfg->max_concurrent, cfg->queue_depth);
  audit()->write(config_record("node_started", *cfg));
  if (cfg->audit_log.empty()) spdlog::warn("no audit_log in the config: runs and refusals are not audited");
  for (const auto& w : config_warnings(*cfg)) spdlog::warn("{}", w);
  notify_service_manager("READY=1\n" + serving_status(*cfg));
  for (;;) {
    siginfo_t info;
    const timespec one_second{1, 0};
    int sig = ::sigtimedwait(&signals, &info, &one_second);
    if (!spawner_.alive()) {
      // Every run would fail from now on: stopped, so that the service
      // manager starts the node again, rather than serving errors.
      spdlog::critical("the spawner (pid {}) has died: no run can start; stopping", spawner_.pid());
      drain("spawner_died");
      return 1;
    }
    if (sig < 0 || sig == SIGCHLD) {
      audit()->write_suppressed();  // a flood of refusals that stopped is said within a second or two
      continue;
    }
    if (sig == SIGHUP) {
      // MONOTONIC_USEC: systemd 253's Type=notify-reload matches it to the signal.
      notify_service_manager("RELOADING=1\nMONOTONIC_USEC=" + monotonic_usec_now());
      reload();  // a config that does not load leaves the running one
      notify_service_manager("READY=1\n" + serving_status(*config()));
      continue;
    }
    spdlog::info("{} received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    drain(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  spdlog::info("stopped");
  return 0;
}

// A cgroup_parent that cannot hold a tenant's runs would be ignored (on a
// host whose limits are enforced through cgroup v1), and the runs would
// escape the slice the operator named. Checked each time the config loads
// (start, --check, SIGHUP), though a changed parent applies only at restart.
void check_cgroup_parent(const NodeConfig& c) {
  if (c.cgroup_parent.empty()) return;
  for (const auto& tenant : c.tenants) {
    const std::string problem = cgroup_parent_problem(c.cgroup_parent, spec_from_profile(tenant.profile).limits.cgroup);
    if (!problem.empty())
      throw ProfileError(c.source, 0, 0, "cgroup_parent " + problem + " (tenant " + tenant.name + ")");
  }
}

}  // namespace

NodeConfig load_node_config(const NodeOptions& options) {
  NodeConfig c = options.config_path.empty() ? builtin_node_config(options.search)
                                             : load_node_config(options.config_path, options.search);
  if (options.listen) {
    ListenerConfig l = parse_listen_address(*options.listen);
    c.listeners = {l};
  }
  check_cgroup_parent(c);
  return c;
}

namespace {

// Each connection holds a descriptor, and while its request is read, two:
// with systemd's default soft limit of 1024, a few hundred slow clients
// would leave none for the runs' sockets. Sandboxes set their own limit.
void raise_open_file_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = r.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &r) != 0) spdlog::warn("raise RLIMIT_NOFILE: {}", std::strerror(errno));
}

}  // namespace

int run_node(const NodeOptions& options) {
  // Forked first, while this process has one thread (DESIGN.md) and before
  // the config brings the tenants' tokens into its memory, of which the
  // spawner, its workers and every started sandbox's PID 1 are copies.
  raise_open_file_limit();
  set_audit_node_id(random_hex_id(8, "node id"));
  if (const std::string inherited = inherited_seccomp_warning(); !inherited.empty()) spdlog::warn("{}", inherited);
  Spawner spawner = Spawner::fork_waiting();
  NodeConfig config = load_node_config(options);
  if (config.cgroup_parent.empty()) {
    if (const std::string problem = move_into_supervisor_leaf(CgroupHost::detect(), {::getpid(), spawner.pid()});
        !problem.empty())
      spdlog::warn("cgroup v2: {}: runs with limits will fail to make their cgroups", problem);
  }
  spawner.start(LauncherOptions{.cgroup_parent = config.cgroup_parent, .cgroup_host = std::nullopt});
  sigset_t signals;
  sigemptyset(&signals);
  // SIGCHLD: the spawner's death wakes the node at once (no run can start).
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&signals, sig);
  // Blocked before any thread starts, so only sigwaitinfo sees them.
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  // Under a file size limit (LimitFSIZE=) the audit log's write fails, and
  // runs stop, rather than the node being killed mid-run.
  ::signal(SIGXFSZ, SIG_IGN);
  // Bodies and answers of a megabyte or more (a run's result is the
  // workload's to size) are mapped for themselves and unmapped when freed.
  // glibc's threshold otherwise rises to the largest block freed, and each
  // request thread's arena then kept its largest answer's pages: 8 MiB
  // results took the node from 12 to 700 MB, and it stayed there.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  const std::string cgroup_parent = config.cgroup_parent;
  Node node(options, std::move(config), spawner);
  const int status = node.serve(signals);
  // A spawner that died never removed the run parent it made.
  if (!spawner.alive()) {
    try {
      remove_empty_run_parents(CgroupHost::detect(cgroup_parent));
    } catch (const std::exception& e) {
      spdlog::warn("the run-parent cgroup the spawner made may be left: {}", e.what());
    }
  }
  return status;
}

}  // namespace nsbox
