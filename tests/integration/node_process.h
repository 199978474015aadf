// A real `nsbox serve` started by a test on 127.0.0.1, and small socket
// helpers, shared by the node tests and the security suite.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fixture.h"

namespace nsbox::testing {

inline int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// A TCP connection to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
  ::close(s);
  return -1;
}

// Reads until the answer holds a JSON body's end ("}) or the peer closes.
inline std::string read_answer(int s) {
  std::string answer;
  char buf[4096];
  for (ssize_t n; answer.find("\"}") == std::string::npos && (n = ::recv(s, buf, sizeof buf, 0)) > 0;)
    answer.append(buf, static_cast<size_t>(n));
  return answer;
}

inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::istringstream in(slurp("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children"));
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

// A node process on 127.0.0.1 with its own TMPDIR (so its workspaces and
// artifacts can be checked for leaks) and its log in a file.
class NodeProcess {
 public:
  // config: the node config's text without listeners (added here), or "" for
  // the built-in config with --listen.
  // join_cgroups: cgroup.procs files the node joins before it starts.
  // in_child: called in the node's process before it execs (no allocation).
  explicit NodeProcess(const std::string& config_body = "", const std::string& extra_listeners = "",
                       std::vector<std::string> join_cgroups = {}, std::function<void()> in_child = {})
      : port_(free_port()), join_cgroups_(std::move(join_cgroups)), in_child_(std::move(in_child)) {
    tmp_ = dir_.path() + "/tmp";
    ::mkdir(tmp_.c_str(), 0755);
    log_ = dir_.path() + "/node.log";
    std::vector<std::string> args = {NSBOX_BINARY, "serve"};
    if (config_body.empty()) {
      args.push_back("--listen");
      args.push_back("127.0.0.1:" + std::to_string(port_));
    } else {
      write_config(config_body, extra_listeners);
      args.push_back("--config");
      args.push_back(config_path());
    }
    start(args);
  }
  ~NodeProcess() {
    if (pid_ > 0) {
      // The spawner outlives the server by the time it takes to tear down
      // what it still holds (warm sandboxes, cancelled runs): wait for it,
      // so that the test's directory is free to remove.
      std::vector<pid_t> spawner = children_of(pid_);
      ::kill(pid_, SIGKILL);
      wait_exit();
      for (int i = 0; i < 1500 && !spawner.empty() && ::kill(spawner[0], 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void write_config(const std::string& body, const std::string& extra_listeners = "") const {
    std::ofstream(config_path()) << "listeners:\n  - address: 127.0.0.1:" << port_ << "\n" << extra_listeners << body;
  }
  std::string config_path() const { return dir_.path() + "/node.yaml"; }
  const std::string& dir() const { return dir_.path(); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& tmp() const { return tmp_; }
  std::string log() const { return slurp(log_); }

  httplib::Client client(int port = 0) const {
    httplib::Client c("127.0.0.1", port ? port : port_);
    c.set_read_timeout(120, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }

  // Until /metrics shows n sandboxes running (60 s: the VM rig is slow).
  bool wait_running(int n) const {
    const std::string line = "nsbox_sandboxes_running " + std::to_string(n) + "\n";
    for (int i = 0; i < 3000; ++i) {
      auto m = client().Get("/metrics");
      if (m && m->body.find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  bool ready() const {
    for (int i = 0; i < 1200; ++i) {
      if (auto r = client().Get("/health"); r && r->status == 200) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Sends sig and returns the exit code (128+signal when killed).
  int stop(int sig = SIGTERM) {
    ::kill(pid_, sig);
    return wait_exit();
  }
  // stop(sig), bounded: nullopt (and the node killed) when it has not
  // exited within limit.
  std::optional<int> stop_within(int sig, std::chrono::seconds limit) {
    ::kill(pid_, sig);
    int status = 0;
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;  // the destructor kills it
  }
  int wait_exit() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  void start(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t test = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test binary that dies (SIGPIPE, abort) skips the destructor: the
      // node goes with it instead of serving on with its sandboxes.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != test) ::_exit(126);
      for (const auto& procs : join_cgroups_) {  // "0": the writer itself
        const int cg = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
        if (cg < 0 || ::write(cg, "0", 1) != 1) ::_exit(125);
        ::close(cg);
      }
      if (in_child_) in_child_();
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("TMPDIR", tmp_.c_str(), 1);
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
  }

  TempDir dir_;
  int port_;
  std::vector<std::string> join_cgroups_;
  std::function<void()> in_child_;
  pid_t pid_ = -1;
  std::string tmp_;
  std::string log_;
};

inline httplib::Result post(const httplib::Client& c, const std::string& path, const std::string& body,
                            const httplib::Headers& headers = {}) {
  return const_cast<httplib::Client&>(c).Post(path.c_str(), headers, body, "application/json");
}

// A /run body.
inline std::string request(const std::string& code,
                           const nlohmann::ordered_json& inputs = nlohmann::ordered_json::object(), double timeout = 0,
                           const std::string& language = "") {
  nlohmann::ordered_json j = {{"code", code}, {"inputs", inputs}};
  if (timeout > 0) j["timeout"] = timeout;
  if (!language.empty()) j["language"] = language;
  return j.dump();
}

// The value of a Prometheus line "NAME VALUE" of the node's /metrics, or -1.
inline double metric(const NodeProcess& node, const std::string& name) {
  auto m = node.client().Get("/metrics");
  if (!m) return -1;
  size_t at = m->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(m->body.substr(at + name.size() + 2));
}

// Until metric name reaches at least value (60 s: the VM rig is slow).
inline bool wait_metric(const NodeProcess& node, const std::string& name, double value) {
  for (int i = 0; i < 3000; ++i) {
    if (metric(node, name) >= value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Run cgroups whose owner (a worker, named in the cgroup) has exited: a leak.
inline std::set<std::string> orphaned_run_cgroups() {
  std::set<std::string> out;
  const CgroupHost& host = launcher().cgroup_host();
  std::vector<std::string> parents;
  if (host.v2_mount) parents.push_back(host.v2_self_dir + "/nsbox");
  for (const auto& [c, dir] : host.v1_self_dirs) parents.push_back(dir + "/nsbox");
  for (const auto& parent : parents) {
    for (const auto& name : dir_entries(parent)) {
      if (name.rfind("run-", 0) != 0) continue;
      pid_t owner = std::atoi(name.c_str() + 4);
      if (::kill(owner, 0) != 0) out.insert(parent + "/" + name);
    }
  }
  return out;
}

}  // namespace nsbox::testing
