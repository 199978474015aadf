// `nsbox serve`: the HTTP node. Speaks the platform's sandbox API (/run,
// /health) and nsbox's own (/v1/runs, /metrics), maps bearer tokens to
// tenants and their profiles, bounds concurrency, and writes the audit log.
// Sandboxes are launched by the Spawner, never by the server's threads.
#pragma once

#include <optional>
#include <string>

#include "nsbox/node_config.h"
#include "nsbox/profile_loader.h"

namespace nsbox {

struct NodeOptions {
  std::string config_path;            // empty: the built-in single-tenant node
  std::optional<std::string> listen;  // --listen ADDR:PORT replaces the listeners
  ProfileSearch search;
};

// Loads the config as options say (built-in, file, --listen applied).
NodeConfig load_node_config(const NodeOptions& options);

// Runs the node until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code.
int run_node(const NodeOptions& options);

}  // namespace nsbox
