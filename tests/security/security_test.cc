// The escape-attempt suite: every program in tests/security/attacks/ (Python)
// and tests/security/attacks_js/ (JavaScript) runs in
// a real sandbox with the default profile (or, with `# profile: egress`, a
// profile with network egress whose rules are as tempting as an operator's
// mistake could make them), once through `nsbox run` and once through the
// HTTP node, whose warm pool must serve every one of them (a warm sandbox
// must stop every attack a cold one does), and must report that it was
// stopped (or be stopped by a limit where its header says so); the attacks
// that a fork server may serve run through one too. The harness plants what
// an attacker would look for on the host: a secret file, a loopback service,
// an abstract unix socket, an environment variable, its own pid.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "../integration/fixture.h"
#include "../integration/node_process.h"
#include "nsbox/seccomp.h"

namespace nsbox::testing {
namespace {

using json = nlohmann::json;

const std::string kSecurityDir = std::string(NSBOX_SOURCE_DIR) + "/tests/security";

enum class Lang { kPython, kJavaScript };

// Where a language's attacks live, and how its comments start.
struct LangFiles {
  const char* dir;
  const char* ext;
  const char* prelude;
  const char* comment;
};
const LangFiles& files_of(Lang lang) {
  static const LangFiles python{"attacks", ".py", "prelude.py", "#"};
  static const LangFiles javascript{"attacks_js", ".js", "prelude.js", "//"};
  return lang == Lang::kPython ? python : javascript;
}

// What an attack's header asks of the harness (`// ...` in JavaScript):
// `# expect: killed|no_process|truncated`, `# expect: limit NAME...` (the
// run's limits_hit must name one), `# denied: CALL...` (the run's
// denied_syscalls must count each), `# timeout: SECONDS`, `# needs: i386`,
// `# profile: egress`. docs/TESTING.md has the table.
struct Attack {
  std::string name;
  Lang lang = Lang::kPython;
  std::string code;  // prelude + attack
  std::set<std::string> expect;
  std::set<std::string> limits;  // `expect: limit NAME...`: what limits_hit must name (one of them)
  std::set<std::string> denied;  // `denied: CALL...`: the filter must have refused (and counted) each
  int timeout_s = 30;
  bool egress = false;      // `# profile: egress`
  bool needs_i386 = false;  // `# needs: i386`: the host kernel must run i386 system calls
};

std::set<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> words;
  for (std::string w; in >> w;) words.insert(w);
  return words;
}

Attack load_attack(const std::string& name, Lang lang = Lang::kPython) {
  const LangFiles& f = files_of(lang);
  Attack a;
  a.name = name;
  a.lang = lang;
  const std::string body = slurp(kSecurityDir + "/" + f.dir + "/" + name + f.ext);
  a.code = slurp(kSecurityDir + "/" + f.prelude) + "\n" + body;
  const std::string c = f.comment;
  const std::regex expect_re("^" + c + " expect: (\\w+)(.*)$", std::regex::multiline);
  for (std::sregex_iterator it(body.begin(), body.end(), expect_re), end; it != end; ++it) {
    a.expect.insert((*it)[1]);
    if ((*it)[1] == "limit")
      a.limits.merge(words_of((*it)[2]));
    else if (!words_of((*it)[2]).empty())
      throw std::runtime_error(name + ": `expect: " + (*it)[1].str() + "` takes no argument");
  }
  const std::regex denied_re("^" + c + " denied: (.*)$", std::regex::multiline);
  for (std::sregex_iterator it(body.begin(), body.end(), denied_re), end; it != end; ++it)
    a.denied.merge(words_of((*it)[1]));
  // A misspelt key or word would silently turn its check off.
  static const std::set<std::string> kHeaderKeys = {"expect", "denied", "timeout", "needs", "profile"};
  const std::regex key_re("^" + c + " ?(\\w+):", std::regex::multiline);
  for (std::sregex_iterator it(body.begin(), body.end(), key_re), end; it != end; ++it)
    if (!kHeaderKeys.contains((*it)[1])) throw std::runtime_error(name + ": unknown header " + (*it)[1].str());
  static const std::set<std::string> kExpectWords = {"killed", "limit", "no_process", "truncated"};
  for (const auto& word : a.expect)
    if (!kExpectWords.contains(word)) throw std::runtime_error(name + ": unknown expect word " + word);
  // The names Result.limits_hit uses (src/sandbox.cc).
  static const std::set<std::string> kLimitNames = {
      "memory", "pids", "cpu_time", "wall_time", "output", "cpu", "network_connections", "network_bytes"};
  if (a.expect.contains("limit") && a.limits.empty())
    throw std::runtime_error(name + ": `expect: limit` must name the limit that stops it");
  for (const auto& limit : a.limits)
    if (!kLimitNames.contains(limit)) throw std::runtime_error(name + ": unknown limit " + limit);
  const std::regex timeout_re("^" + c + " timeout: (\\d+)", std::regex::multiline);
  std::smatch m;
  if (std::regex_search(body, m, timeout_re)) a.timeout_s = std::stoi(m[1]);
  const std::regex needs_re("^" + c + " needs: (\\w+)", std::regex::multiline);
  if (std::regex_search(body, m, needs_re)) {
    if (m[1] != "i386") throw std::runtime_error(name + ": unknown need " + m[1].str());
    a.needs_i386 = true;
  }
  const std::regex profile_re("^" + c + " profile: (\\w+)", std::regex::multiline);
  if (std::regex_search(body, m, profile_re)) {
    if (m[1] != "egress") throw std::runtime_error(name + ": unknown profile " + m[1].str());
    a.egress = true;
  }
  return a;
}

std::vector<std::string> attack_names(Lang lang = Lang::kPython) {
  const LangFiles& f = files_of(lang);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kSecurityDir + "/" + f.dir))
    if (e.path().extension() == f.ext) names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The host-side bait, shared by all attacks of the binary.
class Bait {
 public:
  Bait() : secret_(unique_token("nsbox-secret-")), marker_(unique_token("nsbox-marker-")) {
    secret_dir_ = "/var/tmp/" + unique_token("nsbox-sec-");
    std::filesystem::create_directories(secret_dir_);
    secret_path_ = secret_dir_ + "/secret.txt";
    std::ofstream(secret_path_) << "host secret: " << secret_ << "\n";
    ::chmod(secret_path_.c_str(), 0644);  // readable by anyone: only isolation may stop the read
    ::chmod(secret_dir_.c_str(), 0755);
    ::setenv("NSBOX_SECRET_TOKEN", secret_.c_str(), 1);  // inherited by nsbox run, never by the sandbox
    tcp_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(tcp_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(tcp_, 16);
    socklen_t len = sizeof a;
    ::getsockname(tcp_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    abstract_ = unique_token("nsbox-abstract-");
    unix_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    std::memcpy(u.sun_path + 1, abstract_.data(), abstract_.size());
    ::bind(unix_, reinterpret_cast<sockaddr*>(&u),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_.size()));
    ::listen(unix_, 16);
    // An open file description lock on the secret, at an offset no one
    // else uses: /proc/locks lists such locks whatever the reader's pid
    // namespace, with the host file's device and inode.
    lock_fd_ = ::open(secret_path_.c_str(), O_RDWR | O_CLOEXEC);
    ofd_lock_start_ = 7'000'000'000 + ::getpid();
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = ofd_lock_start_;
    lock.l_len = 1;
    if (lock_fd_ < 0 || ::fcntl(lock_fd_, F_OFD_SETLK, &lock) != 0)
      ADD_FAILURE() << "bait: OFD lock on " << secret_path_ << ": " << std::strerror(errno);
  }
  ~Bait() {
    ::close(lock_fd_);
    ::close(tcp_);
    ::close(unix_);
    std::filesystem::remove_all(secret_dir_);
    ::unsetenv("NSBOX_SECRET_TOKEN");
  }

  // Egress that lets the attacker ask for the host's loopback service by
  // name and for "the whole Internet" on its port: only deny_private stands
  // between the sandbox and the service. Nothing here allows any address
  // other than the host's own. NSBOX_TEST_EGRESS_EXTRA (a line of YAML)
  // weakens it, to show the suite fails when the defence is off.
  std::string egress_profile() const {
    if (egress_profile_.empty()) {
      egress_profile_ = secret_dir_ + "/egress.yaml";
      const std::string port = std::to_string(port_);
      const char* extra = std::getenv("NSBOX_TEST_EGRESS_EXTRA");
      std::ofstream(egress_profile_) << "name: attacker-egress\nextends: default\nnetwork:\n  mode: egress\n"
                                     << (extra ? "  " + std::string(extra) + "\n" : "")
                                     << "  allow:\n    - {host: localhost, ports: [" << port << "]}\n"
                                     << "    - {cidr: 0.0.0.0/0, ports: [" << port << "]}\n"
                                     << "    - {cidr: \"::/0\", ports: [" << port << "]}\n";
    }
    return egress_profile_;
  }

  // The default profile with its Python and JavaScript runs forked by a
  // fork server.
  std::string forked_profile() const {
    if (forked_profile_.empty()) {
      forked_profile_ = secret_dir_ + "/forked.yaml";
      std::ofstream(forked_profile_) << "name: attacker-forked\nextends: default\nfork_server: true\n";
    }
    return forked_profile_;
  }

  json params() const {
    return {{"secret_path", secret_path_},
            {"secret", secret_},
            {"host_pid", ::getpid()},
            {"host_port", port_},
            {"abstract", abstract_},
            {"marker", marker_},
            {"ofd_lock_start", ofd_lock_start_},
            {"rootfs", std::filesystem::canonical(test_rootfs()).string()},
            {"host_block_devices", host_block_devices()}};
  }

  // Sources of the host's mounts that are device paths ("/dev/vda1").
  static std::vector<std::string> host_block_devices() {
    std::vector<std::string> devices;
    std::istringstream in(slurp("/proc/self/mountinfo"));
    for (std::string line; std::getline(in, line);) {
      size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream tail(line.substr(dash + 3));
      std::string fstype, source;
      tail >> fstype >> source;
      if (source.rfind("/dev/", 0) == 0 && std::find(devices.begin(), devices.end(), source) == devices.end())
        devices.push_back(source);
    }
    return devices;
  }
  const std::string& secret() const { return secret_; }
  const std::string& marker() const { return marker_; }

 private:
  std::string secret_, marker_, secret_dir_, secret_path_, abstract_;
  mutable std::string egress_profile_, forked_profile_;
  int tcp_ = -1, unix_ = -1, port_ = 0, lock_fd_ = -1;
  int64_t ofd_lock_start_ = 0;
};

Bait* bait = nullptr;
constexpr const char* kEgressToken = "egress-attacker-token-0123456789";
constexpr const char* kForkedToken = "forked-attacker-token-0123456789";
NodeProcess* node = nullptr;

// ctest runs each test in a process of its own: the node is started only by
// the tests that use it.
NodeProcess& the_node() {
  if (!node) {
    node = new NodeProcess(
        "tenants:\n  - name: attacker\n    profile: default\n"
        "  - name: egress-attacker\n    token: " +
        std::string(kEgressToken) + "\n    profile: " + bait->egress_profile() +
        "\n  - name: forked-attacker\n    token: " + std::string(kForkedToken) +
        "\n    profile: " + bait->forked_profile() +
        "\ndefault_tenant: attacker\n"
        "limits:\n  max_concurrent: 2\n  queue_depth: 64\n  client_timeout: 120s\n  pool_size: 1\n");
    EXPECT_TRUE(node->ready()) << node->log();
  }
  return *node;
}

class SecurityEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { bait = new Bait; }
  void TearDown() override {
    delete node;
    delete bait;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SecurityEnvironment);

// What one run of an attack came back with, from either path.
struct Outcome {
  std::string status;  // ok, error, timeout, oom, killed, exit_nonzero
  json verdict;        // {"stopped": bool, "detail": str} or null
  bool stdout_truncated = false;
  int signal = 0;  // the signal that ended the run, 0 for none
  std::set<std::string> limits_hit;
  std::map<std::string, int> denied_syscalls;  // refused by the seccomp filter, with counts
  std::vector<std::string> artifact_contents;  // decoded
  std::vector<std::string> artifact_symlinks;  // nsbox run wrote a symlink (it must copy only regular files)
  std::string pool;                            // through the node: warm, cold or forked
  std::string mode_error;                      // the run was not the kind the test asked for
  std::string raw;                             // for failure messages
};

// JavaScript verdicts say whether their run was forked by the fork server
// (prelude.js): it must match what the test asked for.
void check_forked_flag(const Attack& a, bool forked, Outcome& o) {
  if (a.lang != Lang::kJavaScript || !o.verdict.is_object()) return;
  if (!o.verdict.contains("forked") || o.verdict["forked"] != json(forked))
    o.mode_error = std::string("the verdict says forked=") + o.verdict.value("forked", json()).dump() + ", expected " +
                   (forked ? "true" : "false");
}

// What both paths' results say alike: how the run ended and what stopped it.
void read_result(const json& j, Outcome& o) {
  o.status = j.value("status", "");
  o.stdout_truncated = j.value("stdout_truncated", false);
  if (j.contains("signal") && j["signal"].is_number_integer()) o.signal = j["signal"].get<int>();
  for (const auto& limit : j.value("limits_hit", json::array())) o.limits_hit.insert(limit.get<std::string>());
  if (j.contains("denied_syscalls") && j["denied_syscalls"].is_object())
    for (const auto& [call, count] : j["denied_syscalls"].items()) o.denied_syscalls[call] = count.get<int>();
}

Outcome run_through_cli(const Attack& a) {
  const std::string python_footer =
      "\nimport json as _json, sys as _sys\n"
      "class _Args:\n    def __init__(self, p):\n        self.params = p\n"
      "_v = main(_Args(_json.loads(_sys.argv[1])))\n"
      "print('\\nNSBOX-VERDICT ' + _json.dumps(_v), flush=True)\n";
  // `node -e CODE PARAMS`: process.argv[1] is PARAMS. main may be async;
  // the verdict is written synchronously and the process ends with it
  // (timers, workers and children an attack left would keep it alive).
  const std::string js_footer =
      "\n;(async () => {\n"
      "  const _v = await main(new Args(JSON.parse(process.argv[1])));\n"
      "  require('fs').writeSync(1, '\\nNSBOX-VERDICT ' + JSON.stringify(_v) + '\\n');\n"
      "  process.exit(0);\n"
      "})();\n";
  TempDir artifacts;
  std::vector<std::string> command = {"run",         "--json",
                                      "--profile",   a.egress ? bait->egress_profile() : "default",
                                      "--timeout",   std::to_string(a.timeout_s),
                                      "--artifacts", artifacts.path() + "/out",
                                      "--"};
  if (a.lang == Lang::kPython) {
    command.insert(command.end(), {"python3", "-c", a.code + python_footer});
  } else {
    command.insert(command.end(), {"node", "-e", a.code + js_footer});
  }
  command.push_back(bait->params().dump());
  CliResult r = run_cli(command);
  Outcome o;
  o.raw = r.out.substr(0, 2000) + r.err.substr(0, 500);
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) return o;
  read_result(j, o);
  const std::string out = j.value("stdout", "");
  size_t at = out.rfind("NSBOX-VERDICT ");
  if (at != std::string::npos) {
    size_t end = out.find('\n', at);
    o.verdict =
        json::parse(out.substr(at + 14, end == std::string::npos ? std::string::npos : end - at - 14), nullptr, false);
    if (o.verdict.is_discarded()) o.verdict = nullptr;
  }
  if (o.status == "ok" && o.verdict.is_null()) o.status = "no verdict";
  check_forked_flag(a, false, o);
  // Every file the supervisor wrote, at any depth (a followed directory
  // symlink would show up as a subdirectory).
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(artifacts.path() + "/out", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_symlink())
      o.artifact_symlinks.push_back(it->path().string());
    else if (it->is_regular_file())
      o.artifact_contents.push_back(slurp(it->path().string()));
  return o;
}

// Every tenant and language of the node keeps one warm sandbox (pool_size
// 1): three tenants, two languages.
constexpr double kWarmKeys = 6;

// Until every pool key holds its warm sandbox again (after the previous
// attack took one), so that a run is served warm rather than cold; at most
// 30 s (the emulated VM is slow). The caller checks what it got.
void wait_for_warm_pool() {
  for (int i = 0; i < 1500; ++i) {
    if (metric(the_node(), "nsbox_pool_starting") == 0 && metric(the_node(), "nsbox_pool_idle") >= kWarmKeys) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Until the forked tenant's two fork servers (Python, JavaScript) serve; at
// most 60 s (the emulated VM is slow). The caller checks what it got.
void wait_for_fork_servers() {
  for (int i = 0; i < 3000 && metric(the_node(), "nsbox_pool_fork_servers") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The node's artifacts come in base64: decoded here (independently of
// nsbox's encoder), so that the secret is found at any offset.
// Anything but the standard alphabet and its padding throws: a skipped
// character would shift the rest and hide the secret from the search.
std::string decode_base64(const std::string& text) {
  static const auto kValues = [] {
    std::array<int, 256> values;
    values.fill(-1);
    const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) values[static_cast<unsigned char>(alphabet[i])] = static_cast<int>(i);
    return values;
  }();
  const size_t data_end = text.find_last_not_of('=') + 1;
  if (text.size() - data_end > 2) throw std::invalid_argument("base64: too much padding");
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < data_end; ++i) {
    int v = kValues[static_cast<unsigned char>(text[i])];
    if (v < 0) throw std::invalid_argument("base64: byte " + std::to_string(i) + " is not in the alphabet");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out += {static_cast<char>(bits >> 16), static_cast<char>(bits >> 8 & 0xff), static_cast<char>(bits & 0xff)};
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) out += {static_cast<char>(bits >> 10), static_cast<char>(bits >> 2 & 0xff)};
  if (count == 2) out += static_cast<char>(bits >> 4);
  return out;
}

// forked: as the tenant whose Python and JavaScript runs come from the fork
// server.
Outcome run_through_node(const Attack& a, bool forked = false) {
  json body = {{"code", a.code}, {"inputs", bait->params()}, {"timeout", a.timeout_s}};
  if (a.lang == Lang::kJavaScript) body["language"] = "javascript";
  // Through the fork-server tenant, runs meet a warm forked sandbox or are
  // forked at the request, as the pool stands.
  if (!forked) wait_for_warm_pool();
  // Until then (the node has just started) its runs start cold.
  if (forked) wait_for_fork_servers();
  httplib::Headers auth;
  if (a.egress) auth.emplace("Authorization", std::string("Bearer ") + kEgressToken);
  if (forked) auth.emplace("Authorization", std::string("Bearer ") + kForkedToken);
  auto r = post(the_node().client(), "/v1/runs", body.dump(), auth);
  Outcome o;
  if (!r) {
    o.raw = "no HTTP answer";
    return o;
  }
  o.raw = r->body.substr(0, 2000);
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return o;
  read_result(j, o);
  o.pool = j.value("pool", "");
  if (j["return"].is_object()) o.verdict = j["return"];
  // A warm sandbox of that tenant was forked too (ahead of its request).
  if (forked && j.value("pool", "") != "warm" && j.value("pool", "") != "forked")
    o.mode_error = "not forked (pool " + j.value("pool", "?") + ")";
  // An attack through the pool must meet a warm sandbox: a cold start
  // would pass on the launcher's defences, not the warm path's.
  if (!forked && !o.pool.empty() && o.pool != "warm") o.mode_error = "not served warm (pool " + o.pool + ")";
  check_forked_flag(a, forked, o);
  for (const auto& art : j.value("artifacts", json::array())) {
    try {
      o.artifact_contents.push_back(decode_base64(art.value("content_base64", "")));
    } catch (const std::invalid_argument& e) {
      o.mode_error = "artifact " + art.value("name", "?") + ": " + e.what();
    }
  }
  return o;
}

void check(const Attack& a, const Outcome& o) {
  SCOPED_TRACE(o.raw);
  EXPECT_EQ(o.mode_error, "") << a.name << ": the run was not of the kind asked for";
  // NSBOX_TEST_SHOW_VERDICTS=1: every attack's outcome on stderr, passed or not.
  if (std::getenv("NSBOX_TEST_SHOW_VERDICTS"))
    std::cerr << "[verdict] " << a.name << ": status " << o.status << (o.pool.empty() ? "" : ", pool " + o.pool) << ", "
              << (o.verdict.is_null() ? "no verdict" : o.verdict.dump()) << ", limits_hit " << json(o.limits_hit).dump()
              << ", denied " << json(o.denied_syscalls).dump() << "\n";
  const bool stopped = o.verdict.is_object() && o.verdict.value("stopped", false);
  // An attack that says it escaped has, however its run then ended.
  if (o.verdict.is_object() && !stopped) ADD_FAILURE() << a.name << " escaped: " << o.verdict.value("detail", "");
  if (a.expect.count("killed")) {
    EXPECT_EQ(o.status, "killed") << "the attack should have been killed";
    // By the seccomp filter, not by a fault of its own (a kernel without
    // the i386 ABI answers int 0x80 with SIGSEGV).
    EXPECT_EQ(o.signal, SIGSYS) << "killed by signal " << o.signal << ", not by the seccomp filter";
  } else if (a.expect.count("limit") && (o.status == "oom" || o.status == "timeout" || o.status == "killed")) {
    // Ended by a limit: stopped (which one is checked below).
  } else if (a.expect.count("truncated") && o.stdout_truncated && !o.verdict.is_object()) {
    // The verdict line itself was cut by the cap.
  } else if (!o.verdict.is_object()) {
    ADD_FAILURE() << a.name << ": no verdict, status " << o.status;
  }  // else the verdict says stopped, or its escape was reported above
  // Whether the run ended or the attack saw a refusal, it must have been
  // the limit meant to stop it: a bomb that dies of an unrelated fault, or
  // a spinner stopped by its own bug, proves nothing.
  if (a.expect.count("limit")) {
    bool named = std::any_of(a.limits.begin(), a.limits.end(), [&](const auto& l) { return o.limits_hit.contains(l); });
    EXPECT_TRUE(named) << "limits_hit " << json(o.limits_hit).dump() << " names none of " << json(a.limits).dump();
  }
  if (a.expect.count("truncated")) {
    EXPECT_TRUE(o.stdout_truncated) << "the output flood was not capped";
    EXPECT_TRUE(o.limits_hit.contains("output")) << "limits_hit " << json(o.limits_hit).dump() << " lacks output";
  }
  // A call the kernel also refuses to an unprivileged process fails with
  // EPERM whether or not the filter has its rule: only the run's count of
  // refused calls shows that the rule is what answered.
  for (const auto& call : a.denied)
    EXPECT_TRUE(o.denied_syscalls.contains(call))
        << call << " was not refused by the seccomp filter (denied_syscalls " << json(o.denied_syscalls).dump() << ")";
  if (a.expect.count("no_process")) {
    EXPECT_TRUE(wait_for_no_process(bait->marker(), 5000)) << "a process of the run survived it";
  }
  for (const auto& content : o.artifact_contents) {
    EXPECT_EQ(content.find(bait->secret()), std::string::npos) << "an artifact carried the host secret";
    EXPECT_EQ(content.find("aG9zdCBzZWNyZXQ"), std::string::npos) << "an artifact carried the host secret (base64)";
  }
  EXPECT_TRUE(o.artifact_symlinks.empty())
      << "nsbox run wrote a symlink among the artifacts: " << o.artifact_symlinks.front();
}

// Whether this kernel runs i386 system calls (int 0x80) in a 64-bit process:
// without IA32 emulation they fault (SIGSEGV) before any seccomp filter
// sees them, and an attack on the filter's i386 rules proves nothing.
bool host_runs_i386_syscalls() {
  static const bool runs = [] {
    pid_t child = ::fork();
    if (child == 0) {
      static const unsigned char kGetpid[] = {0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3};  // i386 getpid; ret
      void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (page == MAP_FAILED) ::_exit(2);
      std::memcpy(page, kGetpid, sizeof kGetpid);
      ::_exit(reinterpret_cast<int (*)()>(page)() == ::getpid() ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child) return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return runs;
}

// Why the host cannot give an attack what it needs, or nothing.
std::optional<std::string> unmet_need(const Attack& a) {
  if (a.needs_i386 && !host_runs_i386_syscalls())
    return "this kernel has no i386 system calls (no IA32 emulation): int 0x80 faults before seccomp sees it";
  return std::nullopt;
}

class Escape : public ::testing::TestWithParam<std::string> {};

TEST_P(Escape, StoppedThroughNsboxRun) {
  Attack a = load_attack(GetParam());
  if (auto why = unmet_need(a)) GTEST_SKIP() << *why;
  check(a, run_through_cli(a));
}

TEST_P(Escape, StoppedThroughTheNode) {
  Attack a = load_attack(GetParam());
  if (auto why = unmet_need(a)) GTEST_SKIP() << *why;
  check(a, run_through_node(a));
}

TEST_P(Escape, StoppedInARunOfTheForkServer) {
  Attack a = load_attack(GetParam());
  if (auto why = unmet_need(a)) GTEST_SKIP() << *why;
  // Profiles with egress cannot ask for a fork server (refused when loaded).
  if (a.egress) GTEST_SKIP() << "an egress attack: the fork server refuses egress profiles";
  check(a, run_through_node(a, true));
}

INSTANTIATE_TEST_SUITE_P(Attacks, Escape, ::testing::ValuesIn(attack_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// The node path's secret check stands on this decoder.
TEST(EscapeSuite, DecodesTheNodesBase64) {
  EXPECT_EQ(decode_base64("aGVsbG8="), "hello");
  EXPECT_EQ(decode_base64("eGhvc3Qgc2VjcmV0"), "xhost secret");
  EXPECT_EQ(decode_base64("eHhob3N0IHNlY3JldA=="), "xxhost secret");
  EXPECT_EQ(decode_base64(""), "");
  EXPECT_THROW(decode_base64("aGVs-G8="), std::invalid_argument);  // the URL-safe alphabet
  EXPECT_THROW(decode_base64("aGVsbG8=\n"), std::invalid_argument);
}

TEST(EscapeSuite, HasAtLeastFiftyAttacks) { EXPECT_GE(attack_names().size(), 50u); }

// The JavaScript attacks (attacks_js/, on top of prelude.js), the same three
// ways. Through the node's tenant with `fork_server: true` a JavaScript run
// is forked from the Node zygote (zygote.js, forkinit.node), whose
// surface a started run does not have: each verdict says whether its run
// was forked, and must say so exactly there.
class JsEscape : public ::testing::TestWithParam<std::string> {};

TEST_P(JsEscape, StoppedThroughNsboxRun) {
  Attack a = load_attack(GetParam(), Lang::kJavaScript);
  check(a, run_through_cli(a));
}

TEST_P(JsEscape, StoppedThroughTheNode) {
  Attack a = load_attack(GetParam(), Lang::kJavaScript);
  check(a, run_through_node(a));
}

TEST_P(JsEscape, StoppedInARunOfTheForkServer) {
  Attack a = load_attack(GetParam(), Lang::kJavaScript);
  if (a.egress) GTEST_SKIP() << "an egress attack: the fork server refuses egress profiles";
  check(a, run_through_node(a, true));
}

INSTANTIATE_TEST_SUITE_P(JsAttacks, JsEscape, ::testing::ValuesIn(attack_names(Lang::kJavaScript)),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Every call the default filter refuses with EPERM (a refusal the kernel
// would often give anyway) is made by some attack that requires the filter
// to have counted it: a rule added without an attack fails here.
TEST(EscapeSuite, EveryCallTheFilterRefusesWithEpermIsAttackedAndCounted) {
  std::set<std::string> counted;
  for (const auto& name : attack_names()) counted.merge(load_attack(name).denied);
  for (const auto& name : attack_names(Lang::kJavaScript)) counted.merge(load_attack(name, Lang::kJavaScript).denied);
  size_t rules = 0;
  const auto policy = nsbox::SeccompProgram::default_policy();
  for (const auto& rule : policy.rules()) {
    if (rule.action != "EPERM") continue;
    ++rules;
    EXPECT_TRUE(counted.contains(rule.syscall))
        << rule.syscall << " (" << rule.condition << "): no attack's denied: names it";
  }
  EXPECT_GE(rules, 40u) << "the default policy's EPERM rules were not found";
}

TEST(EscapeSuite, HasAtLeastTwentyJavaScriptAttacks) { EXPECT_GE(attack_names(Lang::kJavaScript).size(), 20u); }

}  // namespace
}  // namespace nsbox::testing
