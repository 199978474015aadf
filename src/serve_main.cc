// nsbox-serve: the HTTP node, started as `nsbox serve` (the nsbox CLI execs
// it). A program of its own because it links cpp-httplib and a shared C++
// runtime, which the launcher binary avoids to start fast.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "nsbox/audit.h"
#include "nsbox/cli.h"
#include "nsbox/error.h"
#include "nsbox/logging.h"
#include "nsbox/node.h"

namespace {

constexpr int kUsageExit = 2;
// The host cannot give what every sandbox needs: a service manager that
// restarts on failure must not retry this (the unit's RestartPreventExitStatus).
constexpr int kHostUnfitExit = 3;

std::string exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.parent_path().string();
}

void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) {
      int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) ::dup2(null_fd, fd), ::close(null_fd);
    }
  }
}

void print_summary(const nsbox::NodeConfig& c) {
  std::cout << "config " << c.source << ": ok\n";
  for (const auto& l : c.listeners) {
    std::cout << "  listener " << l.address();
    if (l.language) std::cout << " language=" << nsbox::to_string(*l.language);
    const auto* t = c.anonymous_tenant(l);
    std::cout << " anonymous=" << (t ? t->name : std::string("refused (token required)")) << "\n";
  }
  for (const auto& t : c.tenants)
    std::cout << "  tenant " << t.name << " profile=" << t.profile.name
              << " token=" << (t.token.empty() ? "none" : "set")
              << (t.max_requests ? " max_requests=" + std::to_string(t.max_requests) : std::string()) << "\n";
  std::cout << "  max_concurrent " << c.max_concurrent << ", queue_depth " << c.queue_depth << "\n";
  std::cout << "  metrics token=" << (c.metrics_token.empty() ? "none (/metrics answers anyone)" : "set") << "\n";
  for (const auto& w : nsbox::config_warnings(c)) std::cout << "  warning: " << w << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  ensure_stdio_open();
  CLI::App app{"nsbox serve: the sandbox node (HTTP API compatible with the platform's /run)"};
  app.name("nsbox serve");
  std::string config_path;
  std::string listen;
  bool check = false;
  // An empty value (an unset variable in a unit file) must not fall back to
  // the built-in config: that is a node open to anyone without a token.
  const CLI::Validator& non_empty = nsbox::kNonEmpty;
  app.add_option("--config", config_path, "Node config (YAML); without it: one tenant, default profile, 127.0.0.1:8080")
      ->check(non_empty);
  app.add_option("--listen", listen, "Listen on ADDR:PORT only (replaces the config's listeners)")->check(non_empty);
  app.add_flag("--check", check, "Validate the config and its profiles, print a summary and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsageExit;  // --help is 0; CLI11's own codes are not ours
  }
  nsbox::log_to_stderr("nsbox");
  nsbox::NodeOptions options;
  options.config_path = config_path;
  if (!listen.empty()) options.listen = listen;
  options.search = nsbox::default_profile_search(exe_dir());
  try {
    if (check) {
      const nsbox::NodeConfig config = nsbox::load_node_config(options);
      try {
        nsbox::AuditLog probe(config.audit_log);  // created 0600 as at start, so a bad path shows now
      } catch (const std::exception& e) {
        std::cerr << nsbox::error_line_prefix() << "nsbox serve: " << config.source << ": " << e.what() << std::endl;
        return kUsageExit;
      }
      print_summary(config);
      return 0;
    }
    return nsbox::run_node(options);
  } catch (const nsbox::ProfileError& e) {
    std::cerr << nsbox::error_line_prefix() << "nsbox serve: " << e.what() << std::endl;
  } catch (const std::invalid_argument& e) {
    std::cerr << "nsbox serve: --listen: " << e.what() << std::endl;
  } catch (const nsbox::HostError& e) {
    std::cerr << nsbox::error_line_prefix() << "nsbox serve: " << e.what() << std::endl;
    return kHostUnfitExit;
  } catch (const std::exception& e) {
    std::cerr << nsbox::error_line_prefix() << "nsbox serve: " << e.what() << std::endl;
    return 1;
  }
  return kUsageExit;
}
