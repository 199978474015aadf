// How long a client may take to send its request, and how large its head
// may be, enforced before and around cpp-httplib's request threads.
//
// cpp-httplib 0.11 gives every accepted connection a request thread and
// bounds only each read (client_timeout), so a client that sends a byte now
// and then ("slowloris") holds its thread for as long as it likes, and a
// handful of them hold every thread, /health included. It also reads a
// request or header line whole, however long, before it checks its length.
// The ArrivalWatch therefore keeps a new connection out of the thread pool
// until its request head has arrived whole (looked at with MSG_PEEK, so
// cpp-httplib still reads it all), within request_timeout and within
// kMaxRequestHead bytes; once a thread serves it, the body must arrive
// within request_timeout as well, or the connection is cut, and so must the
// answer be taken once it is written. A chunked
// body's framing lines are bounded as they are received (ChunkedFraming).
//
// Before a thread is given a connection, its head is screened: a request
// refused on its head alone (no token, a body too large, bad framing) is
// answered by the watch, which then reads and drops what the client still
// sends, without holding a request thread (a client sending a refused body
// slowly would otherwise hold one until request_timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace nsbox {

// What a head may hold, request line and headers, before its 431.
constexpr size_t kMaxRequestHead = 32 * 1024;

// The socket the calling thread accepted last (cpp-httplib's accept
// thread, just before it hands the connection on), taken once: -1 if none.
int take_accepted_socket();

// On a request thread: its request has arrived whole, so its deadline no
// longer applies (what follows, the run, has its own). False when the
// deadline passed first: the connection is cut and nothing is to be run.
bool request_arrived();

// On a request thread, once its answer is ready to be written: the thread
// must be done writing it within request_timeout (the client has taken all
// but what the socket buffers hold), or the connection is reset
// (client_timeout bounds only each write, which a client reading a little
// at a time resets).
void answer_under_deadline();

// Answers cut at their deadline (answer_under_deadline) by this process.
uint64_t answers_reset_in_process();

// On a request thread: whether its request holds what the screen gave it
// to hold while it is served (ArrivalWatch::Screened::held) for holder, and
// has not let go of it yet.
bool held_since_the_head(const std::string& holder);

// On a request thread: lets go of what the screen gave its request to hold,
// before the answer is written (a client that sends its next request as
// soon as it has the answer must find it given back), and holds instead
// what `answering` makes of the holder's name until the thread is done with
// the connection: a client that reads its answers slowly, or not at all,
// holds request threads, which the holder's count of answers being written
// bounds. Without a hold from the screen, nothing is held.
void hold_while_answering(const std::function<std::shared_ptr<void>(const std::string& holder)>& answering);

// On a request thread: a duplicate of its connection's socket, open while
// the request is served, or -1 (a thread the watch did not start). For
// watching whether the client went away, never for reading or writing.
int served_socket();

// On a request thread, from its headers: the body is chunked, so from here
// a framing line past kMaxFramingLine fails the read of the connection
// (cpp-httplib would read it whole into memory).
void guard_chunked_framing();

// On a request thread: the body was cut at a framing line past kMaxFramingLine.
bool chunked_framing_too_long();
// On a request thread: why the body's chunked framing is refused (cut when
// it is, or found once cpp-httplib took the body), or null.
const char* chunked_framing_malformed();

class ArrivalWatch {
 public:
  using Job = std::function<void()>;
  struct Limits {
    std::chrono::milliseconds request_timeout;  // head, then body
    std::chrono::milliseconds idle_timeout;     // silence while the head comes
  };
  // Queues a job for a request thread; false when every queue is full.
  using Dispatch = std::function<bool(Job&)>;
  // Counts and records a connection refused here (its answer's status, by
  // the metrics' reason, and the whole answer it is sent), its socket still
  // open.
  using Refused = std::function<void(const char* reason, int status, int fd, const std::string& answer)>;
  // A request refused on its head: the whole answer to send, and how many
  // bytes of what the client sends after it are read and dropped at most
  // before the connection is closed.
  struct HeadRefusal {
    std::string answer;
    uint64_t drained = 0;
  };
  // What the screen decides on a head: a refusal for the watch to answer,
  // or none, and then what is held while a request thread serves the
  // request (a tenant's share), released when the thread lets go of it or
  // is done with it, or when the connection is dropped unserved.
  struct Screened {
    std::optional<HeadRefusal> refusal;
    std::shared_ptr<void> held;
    std::string holder;  // whose it is (a tenant's name)
  };
  // Looks at a request's head (request line to the empty line) on the
  // socket fd before any thread serves it. The screen counts and records
  // its refusals itself.
  using Screen = std::function<Screened(std::string_view head, int fd)>;

  ArrivalWatch(Limits limits, Dispatch dispatch, Refused refused, Screen screen = {});
  ~ArrivalWatch();
  ArrivalWatch(const ArrivalWatch&) = delete;
  ArrivalWatch& operator=(const ArrivalWatch&) = delete;

  // From the accept thread: fd as accepted (>= 0) and cpp-httplib's job
  // that serves and closes it. The job runs once the head is here; a connection
  // refused before that is answered and closed here, its job dropped.
  void admit(int fd, Job job);

  // No more heads are waited for (those waiting are closed); deadlines of
  // requests being read still hold until stop().
  void close_arrivals();
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace nsbox
