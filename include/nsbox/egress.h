// The egress proxy: a sandbox with network egress keeps its empty network
// namespace and gets one way out, a proxy listening inside on
// 127.0.0.1:kEgressProxyPort. The listening socket is created by the sandbox
// child in its own namespace and handed to the supervisor over SCM_RIGHTS;
// the supervisor accepts on it, decides every request against the policy,
// resolves names itself and connects (from the host's network) to exactly
// the address it checked.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nsbox/egress_policy.h"
#include "nsbox/egress_protocol.h"
#include "nsbox/egress_report.h"
#include "nsbox/unique_fd.h"

namespace nsbox {

constexpr uint16_t kEgressProxyPort = 3128;
constexpr const char* kEgressProxyHost = "127.0.0.1";

// Timeouts of one proxied connection (tests shorten them).
struct EgressTimeouts {
  int handshake_ms = 10000;  // the request head must arrive within this
  int resolve_ms = 5000;
  int connect_ms = 10000;
};

class EgressProxy {
 public:
  explicit EgressProxy(EgressPolicy policy, EgressTimeouts timeouts = {});
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;
  ~EgressProxy();

  // Starts accepting on listener (a listening TCP socket). Once only.
  void start(UniqueFd listener);
  // Closes the listener and every connection, and waits for the threads.
  // Idempotent; the report is complete afterwards.
  void stop();
  EgressReport report() const;
  // From now on, each change to the report (a decision, a relay's end, a
  // count past the cap) is also told to journal, which is told the report
  // as it stands at once.
  void set_journal(EgressJournal journal);

  struct Shared;  // state the connection threads share

 private:
  void accept_loop();

  std::shared_ptr<Shared> shared_;
  UniqueFd listener_;
  std::thread acceptor_;
  bool stopped_ = false;
};

// The environment a sandbox with egress gets: HTTP_PROXY, HTTPS_PROXY,
// ALL_PROXY (socks5h), NO_PROXY in both cases, and NODE_OPTIONS loading the
// Node preload (kNodeEgressPreload) that makes fetch and http(s) use them.
std::vector<std::pair<std::string, std::string>> egress_environment(const EgressPolicy& policy,
                                                                    const std::string& node_options);

// Where the rootfs keeps the Node preload.
constexpr const char* kNodeEgressPreload = "/opt/nsbox/egress.js";

}  // namespace nsbox
