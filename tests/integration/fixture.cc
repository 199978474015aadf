#include "fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "nsbox/fork_server.h"
#include "nsbox/proc_stat.h"

namespace nsbox::testing {

std::string test_rootfs() {
  const char* env = std::getenv("NSBOX_TEST_ROOTFS");
  return env && *env ? env : NSBOX_DEFAULT_ROOTFS;
}

RunSpec capture_spec(std::vector<std::string> argv) {
  RunSpec spec;
  spec.rootfs = test_rootfs();
  spec.argv = std::move(argv);
  spec.env = default_environment();
  spec.stdio = StdioMode::kCapture;
  // A deadline only against hangs: the VM rig is ~50x slower (a walk of the
  // whole tree takes tens of seconds there).
  spec.limits.wall_time = std::chrono::seconds(in_vm_guest() ? 180 : 30);
  return spec;
}

const Launcher& launcher() {
  static Launcher instance;
  return instance;
}

Result run_with(const RunSpec& spec) { return launcher().run(spec); }
Result run(std::vector<std::string> argv) { return run_with(capture_spec(std::move(argv))); }

std::string python(const std::string& code) {
  Result r = run({"python3", "-c", code});
  EXPECT_EQ(r.status, RunStatus::kOk) << "error: " << r.error << "\nstderr: " << r.stderr_data;
  return r.stdout_data;
}

namespace {

std::string read_fd(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

pid_t spawn(const std::vector<std::string>& args, int out_fd, int err_fd, std::string binary = NSBOX_BINARY,
            const std::function<void()>& in_child = {}) {
  std::vector<char*> argv;
  argv.push_back(binary.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (in_child) in_child();
    if (out_fd >= 0) ::dup2(out_fd, 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    ::execv(binary.c_str(), argv.data());
    ::_exit(126);
  }
  return pid;
}

}  // namespace

int wait_cli(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

CliResult run_cli(const std::vector<std::string>& args) { return run_cli_with_binary(NSBOX_BINARY, args); }

CliResult run_cli_with_binary(const std::string& binary, const std::vector<std::string>& args) {
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  pid_t pid = spawn(args, out[1], err[1], binary);
  ::close(out[1]);
  ::close(err[1]);
  // Read stderr on a thread so neither pipe can fill up and block the child.
  std::string err_text;
  std::thread err_reader([&] { err_text = read_fd(err[0]); });
  std::string out_text = read_fd(out[0]);
  err_reader.join();
  return CliResult{wait_cli(pid), out_text, err_text};
}

pid_t spawn_cli(const std::vector<std::string>& args) { return spawn(args, -1, -1); }

std::pair<int, std::string> run_cli_merged(const std::vector<std::string>& args,
                                           const std::function<void()>& in_child) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  const pid_t pid = spawn(args, out[1], out[1], NSBOX_BINARY, in_child);
  ::close(out[1]);
  std::string text = read_fd(out[0]);
  return {wait_cli(pid), text};
}

std::vector<pid_t> host_pids_with_cmdline(const std::string& needle) {
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (!dir) return found;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string cmdline = ss.str();
    for (auto& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) found.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(dir);
  return found;
}

namespace {

pid_t parent_of(pid_t pid) { return static_cast<pid_t>(std::atoi(proc_stat_field(pid, 4).c_str())); }

}  // namespace

std::vector<pid_t> descendants_with_cmdline(pid_t ancestor, const std::string& needle) {
  std::vector<pid_t> found;
  for (pid_t pid : host_pids_with_cmdline(needle)) {
    for (pid_t p = parent_of(pid); p > 1; p = parent_of(p)) {
      if (p == ancestor) {
        found.push_back(pid);
        break;
      }
    }
  }
  return found;
}

namespace {

std::vector<nlohmann::json> load_contract_cases() {
  std::ifstream in(std::string(NSBOX_SOURCE_DIR) + "/tests/runners/cases.json");
  std::vector<nlohmann::json> out;
  if (!in) return out;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded()) return out;
  for (auto& c : doc["cases"]) {
    // A missing fd 3 cannot happen through nsbox exec, which always builds
    // the result pipe; the runner harness (tests/runners/check_runners.py)
    // covers it. Raw requests (malformed, with a byte-order mark...) are fed
    // to the runner in the sandbox as they are.
    if (c.value("no_fd3", false)) continue;
    out.push_back(c);
  }
  return out;
}

}  // namespace

const std::vector<nlohmann::json>& contract_cases() {
  static const std::vector<nlohmann::json> all = load_contract_cases();
  return all;
}

ExecRequest contract_request(const nlohmann::json& c) {
  ExecRequest r;
  r.language = *parse_language(c["language"].get<std::string>());
  std::string code;
  if (c.contains("code_repeat")) {
    const nlohmann::json& rep = c["code_repeat"];
    code = rep.value("head", "");
    const std::string text = rep["text"];
    for (int i = 0; i < rep["count"].get<int>(); ++i) code += text;
  }
  r.code = code + c["code"].get<std::string>();
  r.inputs = c["inputs"];
  if (c.contains("inputs_repeat")) {
    const nlohmann::json& rep = c["inputs_repeat"];
    std::string text;
    const std::string unit = rep["text"];
    for (int i = 0; i < rep["count"].get<int>(); ++i) text += unit;
    r.inputs[rep["key"].get<std::string>()] = text;
  }
  if (c.contains("inputs_nest")) {
    const nlohmann::json& nest = c["inputs_nest"];
    nlohmann::json value = nlohmann::json::array();
    for (int i = 1; i < nest["depth"].get<int>(); ++i) value = nlohmann::json::array({std::move(value)});
    r.inputs[nest["key"].get<std::string>()] = std::move(value);
  }
  return r;
}

std::vector<pid_t> fork_servers_of(pid_t node, const std::string& script) {
  // Not the processes it forks, which show its command line until they set
  // their own: its children (parent zygote.py) and the runs' PID 1 and
  // workload, which live one pid namespace deeper (NSpid: host, fork
  // server's sandbox, run).
  std::vector<pid_t> found;
  for (pid_t pid : descendants_with_cmdline(node, script)) {
    if (process_alive_with_cmdline(parent_of(pid), script)) continue;
    std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
    size_t levels = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream ids(line.substr(6));
      for (std::string id; ids >> id;) ++levels;
    }
    if (levels == 2) found.push_back(pid);
  }
  return found;
}

bool process_alive_with_cmdline(pid_t pid, const std::string& needle) {
  std::string cmdline = slurp("/proc/" + std::to_string(pid) + "/cmdline");
  for (auto& c : cmdline)
    if (c == '\0') c = ' ';
  return cmdline.find(needle) != std::string::npos;
}

bool wait_for_process(const std::string& needle, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    if (!host_pids_with_cmdline(needle).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool wait_for_no_process(const std::string& needle, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    if (host_pids_with_cmdline(needle).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/nsboxtest-XXXXXX";
  path_ = ::mkdtemp(tmpl.data());
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() { std::filesystem::remove_all(path_); }

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(path_ + "/" + name) << text;
  return path_ + "/" + name;
}

bool in_vm_guest() {
  const char* v = std::getenv("NSBOX_VM_GUEST");
  return v && std::string(v) == "1";
}

std::string unique_token(const std::string& prefix) {
  static int counter = 0;
  return prefix + std::to_string(::getpid()) + "x" + std::to_string(++counter);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string status_field(pid_t pid, const std::string& name) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) return line.substr(name.size() + 2);
  return "";
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<WeightFile> weight_file_in(const std::string& cgroup_dir) {
  if (::access((cgroup_dir + "/cpu.weight").c_str(), F_OK) == 0)
    return WeightFile{cgroup_dir + "/cpu.weight", "1", "100"};
  // Weight 1 of v2's 100 is 10 of v1's 1024 shares.
  if (::access((cgroup_dir + "/cpu.shares").c_str(), F_OK) == 0)
    return WeightFile{cgroup_dir + "/cpu.shares", "10", "1024"};
  return std::nullopt;
}

std::set<std::string> dir_entries(const std::string& path) {
  std::set<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") out.insert(name);
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace nsbox::testing
