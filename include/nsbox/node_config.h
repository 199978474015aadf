// The node's configuration (`nsbox serve --config node.yaml`): listeners,
// tenants with their tokens and profiles, capacity, logging. Loaded strictly,
// like profiles: every error is a ProfileError naming FILE:LINE:COL. The
// schema is documented in docs/OPERATIONS.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nsbox/profile.h"
#include "nsbox/profile_loader.h"
#include "nsbox/runtime.h"

namespace nsbox {

struct ListenerConfig {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 literal, never a name
  int port = 8080;
  // Pinned: requests without "language" run this one, others are refused as
  // the platform's single-language servers refuse them.
  std::optional<Language> language;
  // Who anonymous requests (no Authorization header) run as; the node's
  // default_tenant when empty. With neither, a token is required.
  std::string tenant;

  std::string address() const;  // "127.0.0.1:8080", "[::1]:8080"
};

struct TenantConfig {
  std::string name;
  std::string token;           // empty: reachable only as a listener's tenant
  std::string profile_ref;     // as written: a name or a path
  Profile profile;             // loaded and validated
  std::string profile_yaml;    // to_yaml(profile): what every run of it uses
  std::string profile_sha256;  // of profile_yaml, for the audit log
  uint32_t max_requests = 0;   // its requests admitted at once, running or queued (0: only the node's bounds)
};

struct NodeConfig {
  std::string source;  // the file it was read from, or "<built-in>"
  std::vector<ListenerConfig> listeners;
  std::vector<TenantConfig> tenants;
  std::string default_tenant;
  uint32_t max_concurrent = 0;  // sandboxes at once; 0 in a file is refused
  uint32_t queue_depth = 0;     // requests waiting for a sandbox slot
  uint64_t body_limit = 2ull << 20;
  std::chrono::milliseconds client_timeout{10000};   // per read/write on a connection
  std::chrono::milliseconds request_timeout{30000};  // for a request's head, then for its body
  std::chrono::milliseconds grace_period{30000};     // SIGTERM: time left to running sandboxes
  std::chrono::milliseconds answer_grace{60000};     // past a run's time limit or cancel: its worker is killed
  uint32_t pool_size = 0;                            // warm sandboxes kept per tenant and language (0: none)
  uint64_t pool_memory = 1ull << 30;                 // what the idle warm sandboxes may hold together
  std::string audit_log;                             // empty: no audit file (the built-in config)
  std::string log_level = "info";
  std::vector<std::string> cors_origins;
  std::string cgroup_parent;  // as --cgroup-parent; not reloadable
  // The bearer token GET /metrics asks for (its figures name every tenant);
  // empty: /metrics answers whoever reaches a listener.
  std::string metrics_token;

  const TenantConfig* tenant(const std::string& name) const;
  // The tenant whose token equals token, compared in constant time against
  // every tenant's; null when none matches.
  const TenantConfig* tenant_for_token(const std::string& token) const;
  // Who anonymous requests on the listener run as; null: a token is required.
  const TenantConfig* anonymous_tenant(const ListenerConfig& listener) const;
};

// What a config does that its writer may not mean: what it opens to
// anyone who can reach a listener that is not a loopback address (code run
// without a token, an anonymous tenant there; /metrics without a token),
// and fork_server in a tenant's profile with no warm pool to start it. One
// line each, for `serve --check` and the node's start.
std::vector<std::string> config_warnings(const NodeConfig& c);

// "127.0.0.1:8080", "[::1]:5001", "localhost" refused (an address, not a name).
ListenerConfig parse_listen_address(const std::string& text);

// Loads FILE; profiles are looked up in search, and paths in the file are
// relative to the file's directory.
NodeConfig load_node_config(const std::string& path, const ProfileSearch& search);
NodeConfig load_node_config_text(const std::string& text, const std::string& file, const ProfileSearch& search);

// The node without a config file: one listener on 127.0.0.1:8080, one
// tenant "default" with the default profile, no token needed.
NodeConfig builtin_node_config(const ProfileSearch& search);

// Every key the node config accepts, dotted ("limits.max_concurrent"), for
// the docs test.
const std::vector<std::string>& node_config_schema_keys();

bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace nsbox
