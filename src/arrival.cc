#include "nsbox/arrival.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "nsbox/api.h"
#include "nsbox/chunked_framing.h"
#include "nsbox/error.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// Connections whose head is still coming, per listener. Each holds a
// descriptor and no thread; past this a new one gets its 429 at once.
constexpr size_t kMaxWaitingHeads = 512;
// Of those, from one client address: so that one client trickling heads
// cannot take every place (a gateway's own heads come whole, and rarely wait).
constexpr size_t kMaxWaitingHeadsPerClient = 32;
// Left unread, a closed connection is reset, and the client may lose the
// answer: what is already here is read and dropped first, up to this.
constexpr size_t kDrainedBeforeClose = 256 * 1024;
// Connections refused on their head whose client may still be sending:
// each holds a descriptor and no thread. Past this, or past the share of
// one client address, a refused one is closed once what is already here
// is read (kDrainedBeforeClose).
constexpr size_t kMaxDraining = 512;
constexpr size_t kMaxDrainingPerClient = 32;
// Read from one draining connection per wake-up, so that a client sending
// fast cannot keep the watch's thread (and its lock) to itself.
constexpr size_t kDrainedPerWake = 256 * 1024;
// A look copies the whole head so far (MSG_PEEK starts at its first byte):
// past kCheapLook, a head that grew by less than kLookStep is looked at
// again at most every kLookInterval, so that one sent a byte at a time
// costs a bounded copy per byte rather than one of up to 32 KiB.
constexpr size_t kCheapLook = 4 * 1024;
constexpr size_t kLookStep = 1024;
constexpr auto kLookInterval = std::chrono::milliseconds(100);

thread_local int t_accepted = -1;

}  // namespace

int take_accepted_socket() { return std::exchange(t_accepted, -1); }

}  // namespace nsbox

// cpp-httplib 0.11 is a shared library with no hook on the sockets it
// accepts. This definition stands in for libc's accept() in nsbox-serve
// (the only program that links this file), so that the accept thread can
// tell its ArrivalWatch which socket it hands on. accept4 with no flags is
// the same system call.
extern "C" int accept(int fd, sockaddr* __restrict addr, socklen_t* __restrict len) {
  const int s = ::accept4(fd, addr, len, 0);
  nsbox::t_accepted = s;
  return s;
}

namespace nsbox {
bool received_within_framing(int fd, const void* data, size_t size);
}

// Likewise for recv(), through which cpp-httplib reads every byte of a
// request: a request thread's connection passes its bytes through its
// ChunkedFraming, and a read that makes a framing line too long fails.
// recvfrom with no address is the same system call.
extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
  const ssize_t n = ::recvfrom(fd, buf, len, flags, nullptr, nullptr);
  if (n > 0 && !(flags & MSG_PEEK) && !nsbox::received_within_framing(fd, buf, static_cast<size_t>(n))) {
    errno = EPROTO;
    return -1;
  }
  return n;
}

namespace nsbox {
namespace {

// kReading: the request is arriving, under its deadline; kArrived: it is
// served (the run has deadlines of its own); kAnswering: its answer is
// being written, under a deadline again; kCut: a deadline passed.
enum class Phase { kReading, kArrived, kAnswering, kCut };

// A connection a request thread serves, until the thread is done with it.
struct Reading {
  int served = -1;                        // cpp-httplib's descriptor
  UniqueFd socket;                        // a duplicate: cpp-httplib closes its own descriptor
  Clock::time_point deadline;             // the watch's mutex guards it once added
  std::function<void()> start_answering;  // puts the answer under its deadline
  std::string holder;                     // for whom the screen gave it something to hold
  std::shared_ptr<void> hold;             // that, until let go of
  std::atomic<Phase> phase{Phase::kReading};
  // Only the request thread touches these.
  ChunkedFraming framing;
  bool chunked = false;
};

// A connection whose head is still coming: the watch owns its descriptor.
struct Waiting {
  ArrivalWatch::Job job;
  std::string client;  // the peer's address, without its port
  Clock::time_point accepted;
  Clock::time_point last_data;
  Clock::time_point last_look;
  size_t seen = 0;        // bytes of head here at the last look
  bool look_due = false;  // bytes came that no look has seen yet
};

// A connection refused on its head, answered and shut for sending: what its
// client still sends is read and dropped until it closes, `left` bytes have
// come, or the deadline.
struct Draining {
  uint64_t left = 0;
  Clock::time_point deadline;
  Clock::time_point last_data;
  std::string client;  // the peer's address, as for Waiting
};

thread_local Reading* t_reading = nullptr;
std::atomic<uint64_t> g_answers_reset{0};

std::string answer(int status, const char* phrase, const std::string& message, const char* extra_headers = "") {
  const std::string body = platform_answer(nullptr, message);
  return "HTTP/1.1 " + std::to_string(status) + " " + phrase + "\r\n" + extra_headers +
         "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// Best effort, never blocking: the answer fits in an empty send buffer.
void send_answer(int fd, const std::string& text) {
  if (!text.empty()) (void)::send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Answers a connection nothing was read from and closes it, with what the
// client already sent read first, so that it gets a FIN after the answer
// rather than a reset.
void drain_received(int fd) {
  char sink[16384];
  for (size_t drained = 0; drained < kDrainedBeforeClose;) {
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

void answer_and_close(int fd, const std::string& text) {
  send_answer(fd, text);
  ::shutdown(fd, SHUT_WR);
  drain_received(fd);
  ::close(fd);
}

// Where the HTTP head in data ends as cpp-httplib 0.11 reads it, the first
// byte after a line that is only CRLF after the request line, or npos. It
// skips a line ending in a bare LF, so an empty one ("\n\n") ends nothing,
// and taking it for the end would let a head grow past the limit unguarded.
size_t head_end(std::string_view data, size_t from) {
  const size_t at = data.find("\n\r\n", from > 2 ? from - 2 : 0);
  return at == std::string_view::npos ? at : at + 3;
}

// The peer's address without its port (an IPv6 one without its last 64
// bits), as bytes: what a client's share of
// the waiting places is counted by.
std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a).sin_addr;
    return std::string(reinterpret_cast<const char*>(&in), sizeof in);
  }
  if (a.ss_family == AF_INET6) {
    // A host holds a whole /64: its first half is what names the client.
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    const char* bytes = reinterpret_cast<const char*>(&in6);
    return IN6_IS_ADDR_V4MAPPED(&in6) ? std::string(bytes + 12, 4) : std::string(bytes, 8);
  }
  return {};
}

enum class Look { kIncomplete, kComplete, kTooLarge, kBareLf, kGone };

std::string seconds_text(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

}  // namespace

bool received_within_framing(int fd, const void* data, size_t size) {
  Reading* r = t_reading;
  if (!r || r->served != fd || r->framing.over()) return true;
  r->framing.feed(static_cast<const char*>(data), size);
  return !(r->chunked && (r->framing.too_long() || r->framing.malformed()));
}

void guard_chunked_framing() {
  if (Reading* r = t_reading) r->chunked = true;
}

bool chunked_framing_too_long() {
  const Reading* r = t_reading;
  return r && r->chunked && r->framing.too_long();
}

const char* chunked_framing_malformed() {
  const Reading* r = t_reading;
  return r && r->chunked ? r->framing.malformed() : nullptr;
}

bool held_since_the_head(const std::string& holder) {
  return t_reading && t_reading->hold && t_reading->holder == holder;
}

void hold_while_answering(const std::function<std::shared_ptr<void>(const std::string& holder)>& answering) {
  Reading* r = t_reading;
  if (!r || !r->hold) return;
  // The answer is counted before the share goes: never neither.
  std::shared_ptr<void> next = r->holder.empty() ? nullptr : answering(r->holder);
  r->hold = std::move(next);
}

int served_socket() { return t_reading && t_reading->socket ? t_reading->socket.get() : -1; }

bool request_arrived() {
  Reading* r = t_reading;
  if (!r) return true;
  Phase expected = Phase::kReading;
  return r->phase.compare_exchange_strong(expected, Phase::kArrived) || expected == Phase::kArrived ||
         expected == Phase::kAnswering;
}

uint64_t answers_reset_in_process() { return g_answers_reset.load(); }

void answer_under_deadline() {
  if (Reading* r = t_reading; r && r->start_answering) r->start_answering();
}

struct ArrivalWatch::State {
  Limits limits;
  Dispatch dispatch;
  Refused refused;
  Screen screen;
  UniqueFd epoll;
  UniqueFd wake;
  std::string head_timeout_answer;
  std::string head_silence_answer;
  std::string body_timeout_answer;
  std::string too_large_answer;
  std::string bare_lf_answer;
  std::string overload_answer;

  std::mutex mutex;
  std::unordered_map<int, Waiting> waiting;    // by descriptor
  std::unordered_map<int, Draining> draining;  // by descriptor
  std::map<std::string, size_t> draining_per_client;
  std::map<std::string, size_t> waiting_per_client;
  std::list<std::shared_ptr<Reading>> reading;
  Clock::time_point planned_wake = Clock::time_point::max();
  bool arrivals_closed = false;
  bool stopped = false;
  std::thread thread;
  std::string peeked;

  // Drops a waiting connection from the books (the caller owns its descriptor).
  std::unordered_map<int, Waiting>::iterator forget(std::unordered_map<int, Waiting>::iterator it) {
    auto count = waiting_per_client.find(it->second.client);
    if (count != waiting_per_client.end() && --count->second == 0) waiting_per_client.erase(count);
    return waiting.erase(it);
  }

  Clock::time_point waiting_deadline(const Waiting& w) const {
    return std::min(w.accepted + limits.request_timeout, w.last_data + limits.idle_timeout);
  }

  void wake_up() {
    const uint64_t one = 1;
    if (::write(wake.get(), &one, sizeof one) != sizeof one)
      spdlog::error("arrival watch: wake: {}", std::strerror(errno));
  }

  // Looks at what has arrived of a head without taking it. Each look copies
  // it from the start (MSG_PEEK), so a look is taken only when more has come
  // than the last one saw, and the search starts where that one ended. A
  // complete head is copied into head.
  Look look(int fd, size_t& seen, std::string& head) {
    int queued = 0;
    if (seen > 0 && ::ioctl(fd, FIONREAD, &queued) == 0 && static_cast<size_t>(queued) <= seen)
      return Look::kIncomplete;
    peeked.resize(kMaxRequestHead);
    const ssize_t n = ::recv(fd, peeked.data(), peeked.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return Look::kGone;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Look::kIncomplete : Look::kGone;
    const size_t before = seen;
    seen = static_cast<size_t>(n);
    const std::string_view so_far(peeked.data(), seen);
    if (const size_t end = head_end(so_far, before); end != std::string_view::npos) {
      head.assign(peeked.data(), end);
      return Look::kComplete;
    }
    // An empty line ending in a bare LF: the client meant the head to end,
    // but cpp-httplib skips the line and would wait for more until the
    // deadline. No CRLF head holds "\n\n".
    if (so_far.find("\n\n", before > 0 ? before - 1 : 0) != std::string_view::npos) return Look::kBareLf;
    return seen >= kMaxRequestHead ? Look::kTooLarge : Look::kIncomplete;
  }

  // A complete head: refused by the screen, or served.
  void serve_or_refuse(int fd, Job job, std::string_view head) {
    Screened screened;
    if (screen) screened = screen(head, fd);
    if (screened.refusal) return refuse_and_drain(fd, *screened.refusal);
    start_serving(fd, std::move(job), std::move(screened.held), std::move(screened.holder));
  }

  // Answers a connection refused on its head and shuts it for sending; what
  // the client still sends (a body it did not wait to be told about) is
  // read and dropped by this thread, as it comes, so that the client reads
  // the answer rather than a reset and no request thread waits for it.
  void refuse_and_drain(int fd, const HeadRefusal& refusal) {
    send_answer(fd, refusal.answer);
    ::shutdown(fd, SHUT_WR);
    std::string client = peer_address(fd);
    std::unique_lock<std::mutex> lock(mutex);
    if (arrivals_closed || draining.size() >= kMaxDraining || draining_per_client[client] >= kMaxDrainingPerClient) {
      if (draining_per_client[client] == 0) draining_per_client.erase(client);
      lock.unlock();
      drain_received(fd);
      ::close(fd);
      return;
    }
    ++draining_per_client[client];
    const auto now = Clock::now();
    Draining& d = draining[fd];
    d = Draining{refusal.drained, now + limits.request_timeout, now, std::move(client)};
    // Level-triggered: a wake-up reads at most kDrainedPerWake, and the
    // rest wakes it again.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      spdlog::error("arrival watch: epoll_ctl add socket {}: {}", fd, std::strerror(errno));
      stop_draining(draining.find(fd));
      lock.unlock();
      drain_received(fd);
      ::close(fd);
      return;
    }
    if (draining_deadline(d) < planned_wake) wake_up();
  }

  // Drops a draining connection from the books (the caller owns its descriptor).
  std::unordered_map<int, Draining>::iterator stop_draining(std::unordered_map<int, Draining>::iterator it) {
    auto count = draining_per_client.find(it->second.client);
    if (count != draining_per_client.end() && --count->second == 0) draining_per_client.erase(count);
    return draining.erase(it);
  }

  Clock::time_point draining_deadline(const Draining& d) const {
    return std::min(d.deadline, d.last_data + limits.idle_timeout);
  }

  // Reads and drops some of what a refused connection's client sent;
  // closes it at its end, at its budget, or if reading fails. Called with
  // the lock held.
  void drain_some(std::unordered_map<int, Draining>::iterator it) {
    char sink[16384];
    Draining& d = it->second;
    d.last_data = Clock::now();
    for (size_t taken = 0; taken < kDrainedPerWake;) {
      const ssize_t n = ::recv(it->first, sink, sizeof sink, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0 || static_cast<uint64_t>(n) >= d.left) {  // its end, an error, or all it may send
        ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->first, nullptr);
        ::close(it->first);
        stop_draining(it);
        return;
      }
      d.left -= static_cast<uint64_t>(n);
      taken += static_cast<size_t>(n);
    }
    // More may be here: it wakes the watch again (level-triggered).
  }

  // Wraps cpp-httplib's job so that its request thread reads the request
  // under a deadline, and hands it to the request threads; what the screen
  // gave it to hold goes with it.
  void start_serving(int fd, Job job, std::shared_ptr<void> held = nullptr, std::string holder = {}) {
    Job served = [this, fd, job = std::move(job), held = std::move(held), holder = std::move(holder)]() mutable {
      auto r = std::make_shared<Reading>();
      r->served = fd;
      r->holder = std::move(holder);
      r->hold = std::move(held);
      r->socket = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
      if (!r->socket) {
        // No deadline can be kept on it: refused rather than read unbounded.
        // What arrived is dropped, so cpp-httplib's job finds only the end
        // and closes its socket without serving a request.
        spdlog::warn("arrival watch: duplicate socket {}: {}; the connection is refused", fd, std::strerror(errno));
        refused("overload", 429, fd, overload_answer);
        send_answer(fd, overload_answer);
        ::shutdown(fd, SHUT_RDWR);
        drain_received(fd);
        r->phase = Phase::kCut;
      } else {
        r->deadline = Clock::now() + limits.request_timeout;
        r->start_answering = [this, weak = std::weak_ptr<Reading>(r)] {
          if (auto alive = weak.lock()) start_answer_deadline(*alive);
        };
        add_reading(r);
      }
      t_reading = r.get();
      job();
      t_reading = nullptr;
      if (r->socket) remove_reading(r);
    };
    if (dispatch(served)) return;
    refused("overload", 429, fd, overload_answer);
    answer_and_close(fd, overload_answer);
  }

  void add_reading(const std::shared_ptr<Reading>& r) {
    std::lock_guard<std::mutex> lock(mutex);
    reading.push_back(r);
    if (r->deadline < planned_wake) wake_up();
  }

  // The answer, once it is being written, must be handed to the kernel
  // within request_timeout: a client reading a little at a time would
  // otherwise hold its request thread as long as it likes (client_timeout
  // bounds only each write). What the socket buffers then hold goes out
  // after the thread is done, untimed.
  void start_answer_deadline(Reading& r) {
    std::lock_guard<std::mutex> lock(mutex);
    Phase expected = Phase::kArrived;
    if (!r.phase.compare_exchange_strong(expected, Phase::kAnswering)) return;
    r.deadline = Clock::now() + limits.request_timeout;
    if (r.deadline < planned_wake) wake_up();
  }

  void remove_reading(const std::shared_ptr<Reading>& r) {
    std::lock_guard<std::mutex> lock(mutex);
    reading.remove(r);
  }

  void wait_for_head(int fd, Job job, size_t seen) {
    std::unique_lock<std::mutex> lock(mutex);
    if (arrivals_closed) {
      lock.unlock();
      ::close(fd);
      return;
    }
    std::string client = peer_address(fd);
    if (waiting.size() >= kMaxWaitingHeads || waiting_per_client[client] >= kMaxWaitingHeadsPerClient) {
      if (waiting_per_client[client] == 0) waiting_per_client.erase(client);
      lock.unlock();
      refused("overload", 429, fd, overload_answer);
      answer_and_close(fd, overload_answer);
      return;
    }
    ++waiting_per_client[client];
    const auto now = Clock::now();
    Waiting& w = waiting[fd];
    w = Waiting{std::move(job), std::move(client), now, now, now, seen};
    // Edge-triggered: a look leaves the bytes in place, so only new ones wake.
    // Bytes that came since admit()'s look are reported by the ADD itself.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      spdlog::error("arrival watch: epoll_ctl add socket {}: {}", fd, std::strerror(errno));
      forget(waiting.find(fd));
      lock.unlock();
      answer_and_close(fd, "");
      return;
    }
    if (waiting_deadline(waiting[fd]) < planned_wake) wake_up();
  }

  bool look_now(int fd, const Waiting& w, Clock::time_point now) const {
    if (w.seen < kCheapLook || now >= w.last_look + kLookInterval) return true;
    int queued = 0;
    return ::ioctl(fd, FIONREAD, &queued) != 0 || static_cast<size_t>(queued) >= w.seen + kLookStep;
  }

  // A head looked at by the watch's thread: served, refused or left waiting
  // (a look put off is taken by expire()).
  void on_data(int fd, bool hung_up) {
    std::unique_lock<std::mutex> lock(mutex);
    if (auto d = draining.find(fd); d != draining.end()) return drain_some(d);
    auto it = waiting.find(fd);
    if (it == waiting.end()) return;
    const auto now = Clock::now();
    Waiting& w = it->second;
    w.last_data = now;
    if (!hung_up && !look_now(fd, w, now)) {
      w.look_due = true;
      return;
    }
    w.look_due = false;
    w.last_look = now;
    std::string head;
    Look verdict = look(fd, w.seen, head);
    if (verdict == Look::kIncomplete && hung_up) verdict = Look::kGone;
    if (verdict == Look::kIncomplete) return;
    Job job = std::move(it->second.job);
    forget(it);
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
    lock.unlock();
    switch (verdict) {
      case Look::kComplete:
        return serve_or_refuse(fd, std::move(job), head);
      case Look::kTooLarge:
        refused("head_too_large", 431, fd, too_large_answer);
        return answer_and_close(fd, too_large_answer);
      case Look::kBareLf:
        refused("bad_request", 400, fd, bare_lf_answer);
        return answer_and_close(fd, bare_lf_answer);
      default:  // closed or failed before its head: nothing to answer
        return answer_and_close(fd, "");
    }
  }

  // Heads past their deadline are answered 408 and closed; requests past
  // theirs are cut under their request thread, which then sees the end.
  Clock::time_point expire(Clock::time_point now) {
    struct Late {
      int fd;
      const std::string* answer;  // null: it sent nothing, so nothing is answered
    };
    std::vector<Late> late;
    std::vector<int> looks_due;
    std::vector<std::shared_ptr<Reading>> cut;
    std::vector<std::shared_ptr<Reading>> answers_cut;
    Clock::time_point next = Clock::time_point::max();
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = waiting.begin(); it != waiting.end();) {
        const auto deadline = waiting_deadline(it->second);
        if (deadline > now) {
          next = std::min(next, deadline);
          if (it->second.look_due) {
            const auto look_at = it->second.last_look + kLookInterval;
            if (look_at <= now) looks_due.push_back(it->first);
            next = std::min(next, look_at);
          }
          ++it;
          continue;
        }
        ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->first, nullptr);
        const bool whole_time = now >= it->second.accepted + limits.request_timeout;
        late.push_back({it->first, it->second.seen == 0 ? nullptr
                                   : whole_time         ? &head_timeout_answer
                                                        : &head_silence_answer});
        it = forget(it);
      }
      for (auto it = draining.begin(); it != draining.end();) {
        const auto deadline = draining_deadline(it->second);
        if (deadline > now) {
          next = std::min(next, deadline);
          ++it;
          continue;
        }
        ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->first, nullptr);
        ::close(it->first);
        it = stop_draining(it);
      }
      for (const auto& r : reading) {
        Phase phase = r->phase.load();
        if (phase != Phase::kReading && phase != Phase::kAnswering) continue;
        if (r->deadline > now) {
          next = std::min(next, r->deadline);
          continue;
        }
        if (r->phase.compare_exchange_strong(phase, Phase::kCut))
          (phase == Phase::kReading ? cut : answers_cut).push_back(r);
      }
      planned_wake = next;
    }
    for (int fd : looks_due) on_data(fd, false);
    for (const auto& l : late) {
      if (l.answer) refused("timeout", 408, l.fd, *l.answer);
      answer_and_close(l.fd, l.answer ? *l.answer : std::string());
    }
    for (const auto& r : cut) {
      refused("timeout", 408, r->socket.get(), body_timeout_answer);
      send_answer(r->socket.get(), body_timeout_answer);
      ::shutdown(r->socket.get(), SHUT_RDWR);
    }
    for (const auto& r : answers_cut) {
      // Nothing can be said on it: the answer is partly written. Reset, not
      // closed: a close would leave what the send buffer holds (megabytes)
      // to go out to the slow client after the thread is done with it.
      spdlog::warn("a client did not take its answer within {} (limits.request_timeout): its connection was reset",
                   seconds_text(limits.request_timeout));
      ++g_answers_reset;
      const linger reset{.l_onoff = 1, .l_linger = 0};
      ::setsockopt(r->socket.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      ::shutdown(r->socket.get(), SHUT_RDWR);
    }
    return next;
  }

  void loop() {
    epoll_event events[64];
    Clock::time_point next = Clock::time_point::max();
    for (;;) {
      int timeout_ms = -1;
      if (next != Clock::time_point::max()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60000));
      }
      const int n = ::epoll_wait(epoll.get(), events, 64, timeout_ms);
      if (n < 0 && errno != EINTR) {
        spdlog::error("arrival watch: epoll_wait: {}", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake.get()) {
          uint64_t count = 0;
          (void)!::read(wake.get(), &count, sizeof count);
          continue;
        }
        on_data(events[i].data.fd, (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopped) return;
      }
      next = expire(Clock::now());
    }
  }
};

ArrivalWatch::ArrivalWatch(Limits limits, Dispatch dispatch, Refused refused, Screen screen)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.limits = limits;
  s.dispatch = std::move(dispatch);
  s.refused = std::move(refused);
  s.screen = std::move(screen);
  s.epoll = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!s.epoll) throw SysError("epoll_create1", "arrival watch", errno);
  s.wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake) throw SysError("eventfd", "arrival watch", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s.wake.get();
  if (::epoll_ctl(s.epoll.get(), EPOLL_CTL_ADD, s.wake.get(), &ev) != 0)
    throw SysError("epoll_ctl", "arrival watch wake-up", errno);
  const std::string within = seconds_text(limits.request_timeout);
  s.head_timeout_answer =
      answer(408, "Request Timeout", "request timeout: the request headers did not arrive within " + within);
  s.head_silence_answer =
      answer(408, "Request Timeout",
             "request timeout: nothing more of the request headers arrived for " + seconds_text(limits.idle_timeout));
  s.body_timeout_answer =
      answer(408, "Request Timeout", "request timeout: the request body did not arrive within " + within);
  s.too_large_answer = answer(431, "Request Header Fields Too Large",
                              "request headers too large: the request line and headers exceed " +
                                  std::to_string(kMaxRequestHead / 1024) + " KiB");
  s.bare_lf_answer = answer(400, "Bad Request",
                            "malformed request head: its lines must end in CRLF; a line ending in a bare LF "
                            "is skipped, so an empty one ends nothing");
  s.overload_answer =
      answer(429, "Too Many Requests", "too many requests: the node is at capacity; retry later", "Retry-After: 1\r\n");
  s.thread = std::thread([&s] { s.loop(); });
}

ArrivalWatch::~ArrivalWatch() { stop(); }

void ArrivalWatch::admit(int fd, Job job) {
  State& s = *state_;
  size_t seen = 0;
  std::string head;
  Look first;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    first = s.look(fd, seen, head);
  }
  if (first == Look::kComplete) return s.serve_or_refuse(fd, std::move(job), head);
  if (first == Look::kGone) return answer_and_close(fd, "");
  if (first == Look::kTooLarge) {
    s.refused("head_too_large", 431, fd, s.too_large_answer);
    return answer_and_close(fd, s.too_large_answer);
  }
  if (first == Look::kBareLf) {
    s.refused("bad_request", 400, fd, s.bare_lf_answer);
    return answer_and_close(fd, s.bare_lf_answer);
  }
  s.wait_for_head(fd, std::move(job), seen);
}

void ArrivalWatch::close_arrivals() {
  State& s = *state_;
  std::unordered_map<int, Waiting> closing;
  std::unordered_map<int, Draining> drained;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.arrivals_closed = true;
    closing.swap(s.waiting);
    drained.swap(s.draining);
    s.waiting_per_client.clear();
    s.draining_per_client.clear();
    for (const auto& [fd, w] : closing) ::epoll_ctl(s.epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
    for (const auto& [fd, d] : drained) ::epoll_ctl(s.epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  }
  for (const auto& [fd, w] : closing) answer_and_close(fd, "");
  for (const auto& [fd, d] : drained) answer_and_close(fd, "");
}

void ArrivalWatch::stop() {
  State& s = *state_;
  close_arrivals();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.stopped) return;
    s.stopped = true;
  }
  s.wake_up();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace nsbox
