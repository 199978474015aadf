// What the egress proxy did during one run: the Result's `network` section,
// the audit log's egress lines and the node's egress metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nsbox {

// What the proxy did with one request.
enum class EgressVerdict {
  kAllowed,  // connected and relayed
  kDenied,   // refused by the policy or a cap
  kFailed,   // allowed, but the name did not resolve or the connect failed
};

constexpr const char* to_string(EgressVerdict v) {
  switch (v) {
    case EgressVerdict::kAllowed:
      return "allowed";
    case EgressVerdict::kDenied:
      return "denied";
    case EgressVerdict::kFailed:
      return "failed";
  }
  return "failed";
}

// One request the proxy decided, allowed or denied.
struct EgressConnection {
  std::string protocol;  // http-connect, http, socks5
  std::string host;      // as requested (normalized)
  uint16_t port = 0;
  std::string address;  // the address connected to, or that was refused; empty if none
  EgressVerdict verdict = EgressVerdict::kDenied;
  std::string reason;           // the rule that allowed it, or why it was refused or failed
  uint64_t bytes_sent = 0;      // sandbox -> upstream
  uint64_t bytes_received = 0;  // upstream -> sandbox
  std::string time;             // of the decision, UTC ("2026-11-30T06:24:01.123Z")
};

// What the proxy did during one run: the Result's `network` section.
struct EgressReport {
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t failed = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  bool connection_cap_hit = false;
  bool byte_cap_hit = false;
  std::vector<EgressConnection> connections;  // in order; at most max_connections
};

// What a journal is told as it happens, with the proxy's lock held (so in
// order): the run's report as it stands, and what just changed. A worker
// sends it to the node at once, so that a run whose worker dies before its
// Result still leaves its connections, counts and bytes on record.
struct EgressJournalEntry {
  enum class What {
    kDecided,  // report.connections[index] was just recorded
    kRelayed,  // report.connections[index]'s relay ended: its bytes are final
    kCounted,  // only the counts or caps changed (a request past the cap)
  };
  const EgressReport& report;
  What what;
  size_t index = 0;  // for kDecided and kRelayed
};
using EgressJournal = std::function<void(const EgressJournalEntry&)>;

}  // namespace nsbox
