// Network egress through real sandboxes: clients inside reach only what the
// profile allows, through nsbox's proxy. Every upstream is a server this test
// starts on 127.0.0.1; nothing else is ever a target (other addresses only
// appear as connect() attempts inside the sandbox's own empty namespace).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "fixture.h"
#include "node_process.h"
#include "nsbox/result.h"

namespace nsbox::testing {
namespace {

using nlohmann::json;

// An HTTP server on 127.0.0.1 that answers every request with
// "upstream saw: <request line>" (or 200000 bytes for /big) and counts the
// connections it accepted: a refused request must never reach it.
class Upstream {
 public:
  Upstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("upstream: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Upstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }
  std::string request_lines() const {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      answer(c);
      ::close(c);
    }
  }
  void answer(int c) {
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string head;
    char buf[4096];
    for (ssize_t n; head.find("\r\n\r\n") == std::string::npos && (n = ::recv(c, buf, sizeof buf, 0)) > 0;)
      head.append(buf, static_cast<size_t>(n));
    std::string line = head.substr(0, head.find("\r\n"));
    {
      std::lock_guard lock(mu_);
      lines_ += line + "\n";
    }
    std::string body = line.find(" /big ") != std::string::npos ? std::string(200000, 'x') : "upstream saw: " + line;
    std::string out =
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    for (size_t off = 0; off < out.size();) {
      ssize_t n = ::send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::string lines_;
  std::thread thread_;
};

// An HTTPS server on 127.0.0.1 (openssl s_server with a throwaway
// self-signed certificate), to prove TLS works end to end through CONNECT.
class TlsUpstream {
 public:
  explicit TlsUpstream(const TempDir& dir) : port_(free_port()) {
    const std::string key = dir.path() + "/key.pem", cert = dir.path() + "/cert.pem";
    const std::string gen = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout " + key +
                            " -out " + cert + " >/dev/null 2>&1";
    if (std::system(gen.c_str()) != 0) throw std::runtime_error("openssl req failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::freopen("/dev/null", "w", stdout);
      ::freopen("/dev/null", "w", stderr);
      std::string accept = "127.0.0.1:" + std::to_string(port_);
      ::execlp("openssl", "openssl", "s_server", "-quiet", "-accept", accept.c_str(), "-cert", cert.c_str(), "-key",
               key.c_str(), "-www", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {  // until it listens
      int s = connect_loopback(port_);
      if (s >= 0) {
        ::close(s);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    throw std::runtime_error("openssl s_server did not start");
  }
  ~TlsUpstream() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

std::string write_profile(const TempDir& dir, const std::string& network) {
  return dir.write("egress.yaml", "name: egress\nextends: default\nnetwork:\n" + network);
}

json run_in(const std::string& profile, std::vector<std::string> cmd) {
  std::vector<std::string> args = {"run", "--json", "--rootfs", test_rootfs(), "--profile", profile, "--"};
  args.insert(args.end(), cmd.begin(), cmd.end());
  CliResult r = run_cli(args);
  json out = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(out.is_discarded()) << "exit " << r.exit_code << "\n" << r.out << r.err;
  return out.is_discarded() ? json::object() : out;
}

std::string out_of(const json& r) { return r.value("stdout", "") + r.value("stderr", ""); }

std::string port_rule(int port) { return "    - {cidr: 127.0.0.1/32, ports: [" + std::to_string(port) + "]}\n"; }

TEST(Egress, PythonClientsReachAnAllowedLoopbackServer) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile = write_profile(dir, "  mode: egress\n  allow:\n" + port_rule(up.port()));
  json r =
      run_in(profile, {"python3", "-c",
                       "import http.client, os, socket, struct, urllib.request, requests\n"
                       "print('proxy', os.environ['HTTP_PROXY'], os.environ['ALL_PROXY'])\n"
                       "print('urllib', urllib.request.urlopen('http://127.0.0.1:" +
                           p +
                           "/u?q=1').read().decode())\n"
                           "print('requests', requests.get('http://127.0.0.1:" +
                           p +
                           "/r').text)\n"
                           "c = http.client.HTTPConnection('127.0.0.1', 3128)\n"
                           "c.set_tunnel('127.0.0.1', " +
                           p +
                           ")\n"
                           "c.request('GET', '/tunnel')\n"
                           "print('connect', c.getresponse().read().decode())\n"
                           "s = socket.create_connection(('127.0.0.1', 3128))\n"
                           "s.sendall(b'\\x05\\x01\\x00'); assert s.recv(2) == b'\\x05\\x00'\n"
                           "s.sendall(b'\\x05\\x01\\x00\\x01' + socket.inet_aton('127.0.0.1') + struct.pack('>H', " +
                           p +
                           "))\n"
                           "assert s.recv(10)[1] == 0\n"
                           "s.sendall(b'GET /socks HTTP/1.0\\r\\n\\r\\n')\n"
                           "print('socks5', s.makefile('rb').read().decode().split('\\r\\n\\r\\n')[1])\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_NE(out.find("proxy http://127.0.0.1:3128 socks5h://127.0.0.1:3128"), std::string::npos) << out;
  EXPECT_NE(out.find("urllib upstream saw: GET /u?q=1 HTTP/1.1"), std::string::npos) << out;
  EXPECT_NE(out.find("requests upstream saw: GET /r HTTP/1.1"), std::string::npos) << out;
  EXPECT_NE(out.find("connect upstream saw: GET /tunnel HTTP/1.1"), std::string::npos) << out;
  EXPECT_NE(out.find("socks5 upstream saw: GET /socks HTTP/1.0"), std::string::npos) << out;
  EXPECT_EQ(up.connections(), 4);
  const json& n = r["network"];
  EXPECT_EQ(n["allowed"], 4);
  EXPECT_EQ(n["denied"], 0);
  std::set<std::string> protocols;
  for (const auto& c : n["connections"]) {
    protocols.insert(c["protocol"].get<std::string>());
    EXPECT_EQ(c["address"], "127.0.0.1");
    EXPECT_EQ(c["verdict"], "allowed");
    EXPECT_GT(c["bytes_received"].get<int>(), 0);
  }
  EXPECT_EQ(protocols, (std::set<std::string>{"http", "http-connect", "socks5"}));
}

TEST(Egress, NodeFetchHttpAndHttpsReachAnAllowedServer) {
  Upstream up;
  TempDir dir;
  TlsUpstream tls(dir);
  const std::string p = std::to_string(up.port()), t = std::to_string(tls.port());
  const std::string profile =
      write_profile(dir, "  mode: egress\n  allow:\n    - {cidr: 127.0.0.1/32, ports: [" + p + ", " + t + "]}\n");
  json r =
      run_in(profile, {"node", "-e",
                       "const http = require('http'), https = require('https');\n"
                       "const get = (m, url, o) => new Promise((ok, no) => m.get(url, o || {}, res => {\n"
                       "  let b = ''; res.on('data', d => b += d); res.on('end', () => ok(b)); }).on('error', no));\n"
                       "(async () => {\n"
                       "  console.log('fetch', await (await fetch('http://127.0.0.1:" +
                           p +
                           "/f')).text());\n"
                           "  console.log('http', await get(http, 'http://127.0.0.1:" +
                           p +
                           "/h'));\n"
                           "  const page = await get(https, 'https://127.0.0.1:" +
                           t +
                           "/', {rejectUnauthorized: false});\n"
                           "  console.log('https', page.includes('s_server') ? 'tls-page' : page);\n"
                           "  process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';\n"
                           "  const f = await (await fetch('https://127.0.0.1:" +
                           t +
                           "/')).text();\n"
                           "  console.log('fetch-https', f.includes('s_server') ? 'tls-page' : f);\n"
                           "})().catch(e => { console.log('ERR', e, e.cause); process.exit(1); });\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_NE(out.find("fetch upstream saw: GET /f HTTP/1.1"), std::string::npos) << out;
  EXPECT_NE(out.find("http upstream saw: GET /h HTTP/1.1"), std::string::npos) << out;
  EXPECT_NE(out.find("https tls-page"), std::string::npos) << out;
  EXPECT_NE(out.find("fetch-https tls-page"), std::string::npos) << out;
  EXPECT_EQ(r["network"]["allowed"], 4) << r["network"].dump();
  for (const auto& c : r["network"]["connections"]) EXPECT_EQ(c["protocol"], "http-connect");
}

TEST(Egress, OtherPortsLoopbackMetadataAndMappedAddressesAreDenied) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const int other = free_port();
  // "The Internet" on these ports: without deny_private it would reach the
  // host's loopback; with it, special ranges need a rule of their own.
  const std::string profile =
      write_profile(dir, "  mode: egress\n  allow:\n    - {cidr: 0.0.0.0/0, ports: [80, " + p +
                             "]}\n    - {cidr: 127.0.0.1/32, ports: [" + std::to_string(other) + "]}\n");
  json r = run_in(profile, {"python3", "-c",
                            "import urllib.request, urllib.error\n"
                            "for url in ['http://127.0.0.1:" +
                                p +
                                "/', 'http://169.254.169.254/latest/meta-data/',\n"
                                "            'http://[::ffff:127.0.0.1]:" +
                                p +
                                "/', 'http://[::ffff:a9fe:a9fe]/',\n"
                                "            'http://10.0.0.1/', 'http://[::1]:" +
                                p + "/', 'http://127.0.0.1:" + std::to_string(other + 1) +
                                "/']:\n"
                                "    try:\n"
                                "        urllib.request.urlopen(url); print('REACHED', url)\n"
                                "    except urllib.error.HTTPError as e:\n"
                                "        print(e.code, e.read().decode().strip())\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_EQ(out.find("REACHED"), std::string::npos) << out;
  // The run is told an address is refused, not which range it fell in (or
  // it would tell the host's own addresses from the rest of a range); the
  // Result says.
  EXPECT_NE(
      out.find("403 nsbox egress: denied 127.0.0.1:" + p + ": 127.0.0.1 is refused by the profile's egress rules"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("denied ::ffff:169.254.169.254:80: 169.254.169.254 is refused by the profile's egress rules"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("deny_private"), std::string::npos) << out;
  std::string denials;
  for (const auto& d : r["network"]["denials"]) denials += d.get<std::string>() + "\n";
  EXPECT_NE(denials.find("127.0.0.1:" + p + " denied: 127.0.0.1 is loopback 127.0.0.0/8, refused by deny_private"),
            std::string::npos)
      << denials;
  EXPECT_NE(denials.find("169.254.169.254 is link-local (cloud metadata) 169.254.0.0/16"), std::string::npos)
      << denials;
  EXPECT_NE(denials.find("10.0.0.1 is private (RFC 1918)"), std::string::npos) << denials;
  EXPECT_NE(out.find("denied ::1:" + p + ": no rule allows ::1"), std::string::npos) << out;
  EXPECT_NE(out.find("denied 127.0.0.1:" + std::to_string(other + 1) + ": port " + std::to_string(other + 1) +
                     " is not in rule {cidr: "),
            std::string::npos)
      << out;
  EXPECT_EQ(r["network"]["denied"], 7);
  EXPECT_EQ(r["network"]["denials"].size(), 7u);
  EXPECT_EQ(up.connections(), 0) << "a denied request reached the upstream";
}

TEST(Egress, AHostRuleCannotReachLoopbackThroughDns) {
  // localhost resolves (on the host) to 127.0.0.1: the name is allowed, the
  // address it resolves to is not. The same as a public name rebound to a
  // private address.
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile =
      write_profile(dir, "  mode: egress\n  allow:\n    - {host: localhost, ports: [" + p + "]}\n");
  json r = run_in(profile, {"python3", "-c",
                            "import requests\n"
                            "r = requests.get('http://localhost:" +
                                p +
                                "/', proxies={'http': 'http://127.0.0.1:3128'})\n"
                                "print(r.status_code, r.text.strip())\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  // The run is not told what the name resolved to, nor that it resolved;
  // the Result says.
  EXPECT_NE(r["stdout"].get<std::string>().find("502 nsbox egress: failed localhost:" + p +
                                                ": cannot resolve localhost: Name or service not known"),
            std::string::npos)
      << out_of(r);
  ASSERT_EQ(r["network"]["connections"].size(), 1u);
  EXPECT_EQ(r["network"]["connections"][0]["address"], "127.0.0.1");
  EXPECT_EQ(r["network"]["connections"][0]["reason"],
            "localhost: 127.0.0.1 is loopback 127.0.0.0/8, refused by deny_private (only a cidr rule within that range "
            "allows it)");
  EXPECT_EQ(up.connections(), 0);

  // deny_private: false hands the decision to the host rule alone.
  const std::string open = write_profile(
      dir, "  mode: egress\n  deny_private: false\n  allow:\n    - {host: localhost, ports: [" + p + "]}\n");
  json ok = run_in(open, {"python3", "-c",
                          "import requests\n"
                          "print(requests.get('http://localhost:" +
                              p + "/x', proxies={'http': 'http://127.0.0.1:3128'}).text)\n"});
  EXPECT_NE(ok["stdout"].get<std::string>().find("upstream saw: GET /x"), std::string::npos) << out_of(ok);
}

TEST(Egress, NothingButTheProxyIsReachableInside) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile = write_profile(dir, "  mode: egress\n  allow:\n" + port_rule(up.port()));
  json r = run_in(profile,
                  {"python3", "-c",
                   "import os, socket\n"
                   "print('ifaces', [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]])\n"
                   "for host, port in [('127.0.0.1', " +
                       p + "), ('203.0.113.1', 80), ('10.0.0.1', 443), ('::1', " + p +
                       ")]:\n"
                       "    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET); s.settimeout(2)\n"
                       "    try:\n"
                       "        s.connect((host, port)); print('CONNECTED', host)\n"
                       "    except OSError as e:\n"
                       "        print(host, e.errno)\n"
                       "try:\n"
                       "    socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
                       "except socket.gaierror as e:\n"
                       "    print('dns', e.errno)\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_NE(out.find("ifaces ['lo']"), std::string::npos) << out;
  EXPECT_EQ(out.find("CONNECTED"), std::string::npos) << out;
  EXPECT_EQ(out.find("RESOLVED"), std::string::npos) << out;
  EXPECT_NE(out.find("127.0.0.1 111"), std::string::npos) << out;    // ECONNREFUSED: the sandbox's own loopback
  EXPECT_NE(out.find("203.0.113.1 101"), std::string::npos) << out;  // ENETUNREACH: no route out
  EXPECT_EQ(up.connections(), 0);
  EXPECT_EQ(r["network"]["connections"].size(), 0u);
}

TEST(Egress, ModeNoneHasNoProxyAndNamesFailAtOnce) {
  json r = run_in("default", {"python3", "-c",
                              "import os, socket, time, urllib.request\n"
                              "print('proxy', os.environ.get('HTTP_PROXY'), os.environ.get('NODE_OPTIONS'))\n"
                              "t = time.monotonic()\n"
                              "try:\n"
                              "    socket.getaddrinfo('example.com', 443)\n"
                              "except socket.gaierror:\n"
                              "    pass\n"
                              "print('dns_ms', int((time.monotonic() - t) * 1000))\n"
                              "s = socket.socket(); s.settimeout(2)\n"
                              "print('proxy_port', s.connect_ex(('127.0.0.1', 3128)))\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_NE(out.find("proxy None None"), std::string::npos) << out;
  EXPECT_NE(out.find("proxy_port 111"), std::string::npos) << out;
  const size_t at = out.find("dns_ms ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LT(std::stoi(out.substr(at + 7)), 1000) << out;
  EXPECT_TRUE(r["network"].is_null());
}

TEST(Egress, ConnectionAndByteCapsHold) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile =
      write_profile(dir, "  mode: egress\n  max_connections: 3\n  max_bytes: 20KiB\n  allow:\n" + port_rule(up.port()));
  json r = run_in(profile, {"python3", "-c",
                            "import urllib.request, urllib.error\n"
                            "for i in range(2):\n"
                            "    print(urllib.request.urlopen('http://127.0.0.1:" +
                                p +
                                "/%d' % i).read().decode())\n"
                                "try:\n"
                                "    n = len(urllib.request.urlopen('http://127.0.0.1:" +
                                p +
                                "/big').read()); print('big', n)\n"
                                "except Exception as e:\n"
                                "    print('big failed', type(e).__name__)\n"
                                "try:\n"
                                "    urllib.request.urlopen('http://127.0.0.1:" +
                                p +
                                "/4')\n"
                                "except urllib.error.HTTPError as e:\n"
                                "    print(e.code, e.read().decode().strip())\n"});
  ASSERT_EQ(r["status"], "ok") << out_of(r);
  const std::string out = r["stdout"];
  EXPECT_NE(out.find("upstream saw: GET /1 HTTP/1.1"), std::string::npos) << out;
  EXPECT_EQ(out.find("big 200000"), std::string::npos) << out;
  EXPECT_NE(out.find("403 nsbox egress: denied 127.0.0.1:" + p + ": the run's connection cap (3) is reached"),
            std::string::npos)
      << out;
  const json& n = r["network"];
  EXPECT_LE(n["bytes_sent"].get<uint64_t>() + n["bytes_received"].get<uint64_t>(), 20u * 1024) << n.dump();
  EXPECT_EQ(n["allowed"], 3);
  EXPECT_EQ(n["denied"], 1);
  auto hit = r["limits_hit"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(hit.begin(), hit.end(), "network_connections"), hit.end()) << r["limits_hit"];
  EXPECT_NE(std::find(hit.begin(), hit.end(), "network_bytes"), hit.end()) << r["limits_hit"];
}

// POST /v1/runs as the tenant "acme" of the node tests; the parsed answer
// (null when there was none) and the raw body for messages.
std::pair<json, std::string> run_as_acme(NodeProcess& node, const json& body) {
  httplib::Headers auth = {{"Authorization", "Bearer t0ken-acme-123456"}};
  auto res = node.client().Post("/v1/runs", auth, body.dump(), "application/json");
  if (!res) return {json(), "no HTTP answer"};
  return {json::parse(res->body, nullptr, false), res->body};
}

// The JavaScript runner path of the node (not `node -e`): NODE_OPTIONS must
// reach the runner so that fetch and http go through the proxy.
TEST(Egress, TheJavaScriptRunnerReachesAnAllowedServerAndIsDeniedTheRest) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile = write_profile(dir, "  mode: egress\n  allow:\n" + port_rule(up.port()));
  NodeProcess node("tenants:\n  - {name: acme, token: t0ken-acme-123456, profile: " + profile + "}\n");
  ASSERT_TRUE(node.ready()) << node.log();
  json body = {{"language", "javascript"},
               {"code",
                "const http = require('http');\n"
                "const get = url => new Promise((ok, no) => http.get(url, res => {\n"
                "  let b = ''; res.on('data', d => b += d); res.on('end', () => ok([res.statusCode, b])); })\n"
                "  .on('error', no));\n"
                "async function main(args) {\n"
                "  const f = await (await fetch('http://127.0.0.1:" +
                    p +
                    "/js-fetch')).text();\n"
                    "  const [code, h] = await get('http://127.0.0.1:" +
                    p +
                    "/js-http');\n"
                    "  const meta = await fetch('http://169.254.169.254/latest/meta-data/').then(\n"
                    "    r => 'answered ' + r.status, e => String(e.cause && e.cause.message));\n"
                    "  return [f, code, h, meta];\n"
                    "}\n"}};
  const auto [answer, raw] = run_as_acme(node, body);
  ASSERT_TRUE(answer["return"].is_array() && answer["return"].size() == 4) << raw;
  EXPECT_EQ(answer["return"][0], "upstream saw: GET /js-fetch HTTP/1.1");
  EXPECT_EQ(answer["return"][1], 200);
  EXPECT_EQ(answer["return"][2], "upstream saw: GET /js-http HTTP/1.1");
  // fetch tunnels plain HTTP too: a refusal is a failed fetch whose cause
  // carries the proxy's reason.
  EXPECT_NE(answer["return"][3].get<std::string>().find("no rule allows 169.254.169.254 port 80"), std::string::npos)
      << raw;
  EXPECT_EQ(answer["network"]["allowed"], 2) << raw;
  EXPECT_EQ(answer["network"]["denied"], 1) << raw;
}

TEST(Egress, TheNodeAuditsEveryConnectionAndCountsThem) {
  Upstream up;
  TempDir dir;
  const std::string p = std::to_string(up.port());
  const std::string profile = write_profile(dir, "  mode: egress\n  allow:\n" + port_rule(up.port()));
  NodeProcess node("tenants:\n  - {name: acme, token: t0ken-acme-123456, profile: " + profile +
                   "}\naudit_log: audit.log\n");
  ASSERT_TRUE(node.ready()) << node.log();
  json body = {{"language", "python"},
               {"code",
                "import time, urllib.request, urllib.error\n"
                "def main(args):\n"
                "    ok = urllib.request.urlopen('http://127.0.0.1:" +
                    p +
                    "/audit').read().decode()\n"
                    "    try:\n"
                    "        urllib.request.urlopen('http://169.254.169.254/')\n"
                    "    except urllib.error.HTTPError as e:\n"
                    "        time.sleep(0.3)\n"
                    "        return [ok, e.code]\n"}};
  const auto [answer, raw] = run_as_acme(node, body);
  EXPECT_EQ(answer["return"], json({"upstream saw: GET /audit HTTP/1.1", 403})) << raw;
  EXPECT_EQ(answer["network"]["denials"].size(), 1u) << raw;

  std::vector<json> egress;
  std::string ended;  // the run line's time
  std::ifstream audit(node.dir() + "/audit.log");
  for (std::string line; std::getline(audit, line);) {
    json j = json::parse(line);
    if (j["event"] == "egress") egress.push_back(j);
    if (j["event"] == "run") ended = j["time"];
  }
  ASSERT_EQ(egress.size(), 2u);
  // Each line has the time of its decision (the run went on 0.3 s after
  // the last), as the result does, not the time the run's end wrote it.
  EXPECT_LT(egress[1]["time"].get<std::string>(), ended);
  EXPECT_EQ(egress[1]["time"], answer["network"]["connections"][1]["time"]) << raw;
  EXPECT_LE(egress[0]["time"].get<std::string>(), egress[1]["time"].get<std::string>());
  EXPECT_EQ(egress[0]["tenant"], "acme");
  EXPECT_EQ(egress[0]["verdict"], "allowed");
  EXPECT_EQ(egress[0]["host"], "127.0.0.1");
  EXPECT_EQ(egress[0]["port"], up.port());
  EXPECT_GT(egress[0]["bytes_received"].get<int>(), 0);
  EXPECT_EQ(egress[1]["verdict"], "denied");
  EXPECT_EQ(egress[1]["address"], "169.254.169.254");
  EXPECT_EQ(egress[0]["run_id"], egress[1]["run_id"]);

  auto metrics = node.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"allowed\"} 1\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"denied\"} 1\n"),
            std::string::npos);
}

// A listening socket on 127.0.0.1 that accepts only when asked: a tunnel to
// it stays open for as long as the test likes.
class SilentPeer {
 public:
  SilentPeer() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_.get(), 4) != 0 ||
        ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("silent peer: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
  }
  int port() const { return port_; }
  // Accepts one connection and reads until it has sent `word`, within 30 s.
  bool wait_for(const std::string& word) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1) return false;
    conn_.reset(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    timeval tv{30, 0};
    ::setsockopt(conn_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string got;
    char buf[256];
    for (ssize_t n; got.find(word) == std::string::npos && (n = ::recv(conn_.get(), buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    return got.find(word) != std::string::npos;
  }

 private:
  UniqueFd fd_;
  UniqueFd conn_;
  int port_ = 0;
};

// A worker killed mid-run (an operator, the OOM killer) sends no Result,
// but it sent what its run's proxy did as it did it: the run's connections
// stay on record in the answer, the audit log and the metrics, with the
// counts past the cap and the bytes of each relay that ended; what the
// relay still open had carried died with the worker: null, not 0.
// node_config is added to the node's; worker_comm names the worker to kill;
// warm_sandboxes, if not empty, is the metric that says when the pool's
// two sandboxes (one per language) are waiting.
void expect_the_connections_of_a_killed_workers_run_on_record(const std::string& node_config,
                                                              const std::string& worker_comm,
                                                              const std::string& warm_sandboxes = "") {
  using namespace std::chrono_literals;
  Upstream up;
  SilentPeer held;
  TempDir dir;
  const std::string profile =
      write_profile(dir, "  mode: egress\n  max_connections: 3\n  allow:\n    - {cidr: 127.0.0.1/32, ports: [" +
                             std::to_string(up.port()) + ", " + std::to_string(held.port()) + "]}\n");
  NodeProcess node("tenants:\n  - {name: acme, token: t0ken-acme-123456, profile: " + profile +
                   "}\naudit_log: audit.log\n" + node_config);
  ASSERT_TRUE(node.ready()) << node.log();
  if (!warm_sandboxes.empty()) {
    ASSERT_TRUE(wait_metric(node, warm_sandboxes, 2)) << node.log();
  }
  // Denied, allowed and done, allowed and held open (the cap of 3 is
  // reached), two past the cap; then a word through the open tunnel says so.
  const json body = {{"language", "python"},
                     {"code",
                      "import socket, time, urllib.request\n"
                      "def refused(url):\n"
                      "    try:\n"
                      "        urllib.request.urlopen(url)\n"
                      "    except Exception:\n"
                      "        pass\n"
                      "def main(args):\n"
                      "    refused('http://169.254.169.254/')\n"
                      "    urllib.request.urlopen('http://127.0.0.1:" +
                          std::to_string(up.port()) +
                          "/before-the-kill').read()\n"
                          "    t = socket.create_connection(('127.0.0.1', 3128))\n"
                          "    t.sendall(b'CONNECT 127.0.0.1:" +
                          std::to_string(held.port()) +
                          " HTTP/1.1\\r\\n\\r\\n')\n"
                          "    t.recv(1024)\n"
                          "    refused('http://169.254.169.254/past-the-cap')\n"
                          "    refused('http://169.254.169.254/past-the-cap-again')\n"
                          "    t.sendall(b'over-the-cap')\n"
                          "    time.sleep(60)\n"}};
  auto workers = [&] {
    std::vector<pid_t> found;
    for (pid_t spawner : children_of(node.pid()))
      for (pid_t child : children_of(spawner))
        if (slurp("/proc/" + std::to_string(child) + "/comm") == worker_comm + "\n") found.push_back(child);
    return found;
  };
  // A warm run's worker is one of those waiting before the request (the
  // pool starts others meanwhile); a cold run's, the only one there is.
  const std::vector<pid_t> waiting = workers();
  std::pair<json, std::string> answered;
  std::thread client([&] { answered = run_as_acme(node, body); });
  const bool over_the_cap = held.wait_for("over-the-cap");
  const std::vector<pid_t> to_kill = waiting.empty() ? workers() : waiting;
  if (to_kill.empty() || !over_the_cap) {
    ADD_FAILURE() << "the run did not get past its cap with a worker to kill\n" << node.log();
    client.join();
    return;
  }
  for (pid_t worker : to_kill) EXPECT_EQ(::kill(worker, SIGKILL), 0);
  client.join();
  const auto& [answer, raw] = answered;
  EXPECT_EQ(answer["status"], "error") << raw;
  const json& network = answer["network"];
  ASSERT_TRUE(network.is_object()) << raw;
  EXPECT_EQ(network["allowed"], 2) << raw;
  EXPECT_EQ(network["denied"], 3) << "the two past the cap are counted: " << raw;
  EXPECT_TRUE(network["bytes_received"].is_null()) << "a relay was still open: " << raw;
  EXPECT_EQ(network["denials"].back(), kConnectionCapDenial) << raw;
  EXPECT_NE(std::find(answer["limits_hit"].begin(), answer["limits_hit"].end(), "network_connections"),
            answer["limits_hit"].end())
      << raw;

  std::vector<json> egress;
  json run;
  std::ifstream audit(node.dir() + "/audit.log");
  for (std::string line; std::getline(audit, line);) {
    json j = json::parse(line);
    if (j["event"] == "egress") egress.push_back(j);
    if (j["event"] == "run") run = j;
  }
  ASSERT_EQ(egress.size(), 3u) << "the connections of the killed run are missing from the audit log";
  EXPECT_EQ(egress[0]["verdict"], "denied");
  EXPECT_EQ(egress[0]["address"], "169.254.169.254");
  EXPECT_EQ(egress[1]["verdict"], "allowed");
  EXPECT_EQ(egress[1]["port"], up.port());
  EXPECT_GT(egress[1]["bytes_received"].get<int>(), 0) << "its relay ended before the kill: " << egress[1];
  EXPECT_EQ(egress[2]["port"], held.port());
  EXPECT_TRUE(egress[2]["bytes_sent"].is_null()) << "still open at the kill: " << egress[2];
  for (const json& e : egress) EXPECT_EQ(e["run_id"], run["run_id"]) << e;
  EXPECT_EQ(run["status"], "error");
  EXPECT_EQ(run["network"]["denied"], 3) << run;

  auto metrics = node.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"denied\"} 3\n"),
            std::string::npos)
      << metrics->body;
}

TEST(Egress, TheConnectionsOfARunWhoseWorkerWasKilledStayOnRecord) {
  expect_the_connections_of_a_killed_workers_run_on_record("", "nsbox-worker");
}

TEST(Egress, TheConnectionsOfAWarmRunWhoseWorkerWasKilledStayOnRecord) {
  expect_the_connections_of_a_killed_workers_run_on_record("limits:\n  pool_size: 1\n", "nsbox-warm",
                                                           "nsbox_pool_idle");
}

}  // namespace
}  // namespace nsbox::testing
