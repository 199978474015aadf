// The node's pure parts: config loading, request decoding, answer encoding,
// admission, metrics and audit records. No sockets, no sandboxes.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <mutex>

#include "nsbox/admission.h"
#include "nsbox/api.h"
#include "nsbox/audit.h"
#include "nsbox/error.h"
#include "nsbox/metrics.h"
#include "nsbox/node_config.h"
#include "nsbox/pool.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;

ProfileSearch repo_profiles() { return ProfileSearch{{std::string(NSBOX_SOURCE_DIR) + "/profiles"}}; }

// Named as if in packaging/, so relative paths resolve against the repository.
NodeConfig load(const std::string& text) {
  return load_node_config_text(text, std::string(NSBOX_SOURCE_DIR) + "/packaging/node.yaml", repo_profiles());
}

std::string load_error(const std::string& text) {
  try {
    load(text);
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "(loaded)";
}

const char* kMinimal = "tenants:\n  - name: public\n    profile: default\n";

TEST(NodeConfig, DefaultsForAMinimalConfig) {
  NodeConfig c = load(kMinimal);
  ASSERT_EQ(c.listeners.size(), 1u);
  EXPECT_EQ(c.listeners[0].address(), "127.0.0.1:8080");
  EXPECT_EQ(c.body_limit, 2u << 20);
  EXPECT_EQ(c.client_timeout, std::chrono::seconds(10));
  EXPECT_EQ(c.request_timeout, std::chrono::seconds(30));
  EXPECT_GE(c.max_concurrent, 1u);
  EXPECT_EQ(c.queue_depth, 4 * c.max_concurrent);
  ASSERT_EQ(c.tenants.size(), 1u);
  EXPECT_EQ(c.tenants[0].profile.name, "default");
  EXPECT_FALSE(c.tenants[0].profile_yaml.empty());
  EXPECT_EQ(c.anonymous_tenant(c.listeners[0]), nullptr) << "no default_tenant: tokens required";
}

TEST(NodeConfig, AnUnsetQueueDepthFollowsTheMaxConcurrentThatIsSet) {
  NodeConfig c = load(std::string(kMinimal) + "limits: {max_concurrent: 7}\n");
  EXPECT_EQ(c.max_concurrent, 7u);
  EXPECT_EQ(c.queue_depth, 28u);
  EXPECT_EQ(load(std::string(kMinimal) + "limits: {max_concurrent: 7, queue_depth: 3}\n").queue_depth, 3u);
}

TEST(NodeConfig, TheShippedExampleLoads) {
  // Copied next to token files of its own: the example names tokens/<tenant>.
  auto dir = std::filesystem::temp_directory_path() / ("nsbox-example-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "tokens");
  std::filesystem::copy_file(std::string(NSBOX_SOURCE_DIR) + "/packaging/node.yaml", dir / "node.yaml");
  for (const char* t : {"acme", "batch"}) {
    std::ofstream(dir / "tokens" / t) << t << "-token-0123456789abcdef\n";
    ::chmod((dir / "tokens" / t).c_str(), 0600);
  }
  NodeConfig c = load_node_config((dir / "node.yaml").string(), repo_profiles());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(c.listeners.size(), 3u);
  EXPECT_EQ(c.listeners[0].language, Language::kPython);
  EXPECT_EQ(c.anonymous_tenant(c.listeners[1])->name, "platform");
  EXPECT_EQ(c.anonymous_tenant(c.listeners[2]), nullptr) << "8080 requires a token";
  EXPECT_EQ(c.tenant_for_token("acme-token-0123456789abcdef")->profile.name, "python");
}

TEST(NodeConfig, ListenersTenantsAndTokens) {
  NodeConfig c = load(R"(listeners:
  - address: 127.0.0.1:5001
    language: python
  - address: "[::1]:5002"
    language: javascript
    tenant: acme
tenants:
  - name: public
    profile: default
  - name: acme
    token: acme-0123456789abcdef
    profile: ../profiles/tenants/acme-analytics.yaml
    max_requests: 2
default_tenant: public
limits: {max_concurrent: 3, queue_depth: 0, body_limit: 64KiB, client_timeout: 2s, request_timeout: 90s,
         grace_period: 0s, answer_grace: 2m}
cors: {allow_origins: ["https://Studio.Example.com"]}
)");
  EXPECT_EQ(c.listeners[1].address(), "[::1]:5002");
  EXPECT_EQ(c.listeners[0].language, Language::kPython);
  EXPECT_EQ(c.anonymous_tenant(c.listeners[0])->name, "public");
  EXPECT_EQ(c.anonymous_tenant(c.listeners[1])->name, "acme");
  EXPECT_EQ(c.tenant_for_token("acme-0123456789abcdef")->name, "acme");
  EXPECT_EQ(c.tenant_for_token("acme-0123456789abcdeF"), nullptr);
  EXPECT_EQ(c.tenant_for_token(""), nullptr) << "a tenant without token is never selected by an empty one";
  EXPECT_EQ(c.tenant("acme")->profile.name, "acme-analytics");
  EXPECT_EQ(c.tenant("acme")->max_requests, 2u);
  EXPECT_EQ(c.tenant("public")->max_requests, 0u) << "unset: only the node's bounds";
  EXPECT_EQ(c.max_concurrent, 3u);
  EXPECT_EQ(c.queue_depth, 0u);
  EXPECT_EQ(c.body_limit, 64u << 10);
  EXPECT_EQ(c.client_timeout, std::chrono::seconds(2));
  EXPECT_EQ(c.request_timeout, std::chrono::seconds(90));
  EXPECT_EQ(c.answer_grace, std::chrono::minutes(2));
  EXPECT_EQ(c.cors_origins, std::vector<std::string>{"https://studio.example.com"})
      << "hosts in lower case, as browsers send them";
}

TEST(NodeConfig, ErrorsNameFileLineColumnAndWhatIsWrong) {
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"tenant: []\n", "node.yaml:1:1: unknown top-level key 'tenant' (did you mean 'tenants'?)"},
      {"listeners: []\ntenants: []\n", "node.yaml:1:12: listeners: at least one listener is needed"},
      {"listeners:\n  - address: localhost:80\n" + std::string(kMinimal),
       "node.yaml:2:14: listeners[0].address: \"localhost:80\" is not ADDRESS:PORT with an IP address"},
      {"listeners:\n  - address: 127.0.0.1:70000\n" + std::string(kMinimal), "the port must be 1-65535"},
      {"listeners:\n  - address: 127.0.0.1:1\n    language: ruby\n" + std::string(kMinimal),
       "node.yaml:3:15: listeners[0].language: unknown language \"ruby\""},
      {"tenants:\n  - name: a\n    profile: nope\n",
       "node.yaml:3:14: tenants[0].profile: profile 'nope' not found: no nope.yaml in"},
      {"tenants:\n  - name: A\n    profile: default\n", "\"A\" is not a valid tenant name"},
      {"tenants:\n  - name: a\n    token: short\n    profile: default\n",
       "node.yaml:3:12: tenants[0].token: a token must have 16 to 4096 characters, this one has 5"},
      {"tenants:\n  - name: a\n    token: 0123456789abcdef0\n    token_file: x\n    profile: default\n",
       "give either token or token_file, not both"},
      {"tenants:\n  - name: a\n    profile: default\n  - name: a\n    profile: default\n",
       "node.yaml:4:5: tenants[1]: tenant a is defined twice"},
      {"tenants:\n  - {name: a, token: 0123456789abcdef0, profile: default}\n  - {name: b, token: 0123456789abcdef0, "
       "profile: default}\n",
       "node.yaml:3:5: tenants[1]: tenant b has the same token as another tenant"},
      {std::string(kMinimal) + "default_tenant: nobody\n",
       "node.yaml:4:17: default_tenant: nobody is not one of the tenants"},
      {"listeners:\n  - address: 127.0.0.1:1\n    tenant: x\n" + std::string(kMinimal),
       "node.yaml:2:5: listeners[0]: listener 127.0.0.1:1: tenant x is not one of the tenants"},
      {"listeners:\n  - address: 127.0.0.1:1\n  - address: 127.0.0.1:1\n" + std::string(kMinimal),
       "node.yaml:3:5: listeners[1]: listener 127.0.0.1:1 is defined twice"},
      {"listeners:\n  - address: '[::1]:1'\n  - address: '[0::0001]:1'\n" + std::string(kMinimal),
       "listener [::1]:1 is defined twice"},
      {"listeners:\n  - address: 127.0.0.1:1\n  - address: 0.0.0.0:1\n" + std::string(kMinimal),
       "node.yaml:3:5: listeners[1]: listeners 127.0.0.1:1 and 0.0.0.0:1 cannot both listen"},
      {"listeners:\n  - address: '[::]:1'\n  - address: 127.0.0.1:1\n" + std::string(kMinimal),
       "listeners [::]:1 and 127.0.0.1:1 cannot both listen"},
      {"listeners:\n  - address: '::1:8080'\n" + std::string(kMinimal),
       "\"::1:8080\" is not ADDRESS:PORT with an IP address (127.0.0.1:8080, [::1]:8080)"},
      {"listeners:\n  - address: '[127.0.0.1]:1'\n" + std::string(kMinimal), "is not ADDRESS:PORT"},
      {"listeners:\n  - address: '[::ffff:127.0.0.1]:1'\n" + std::string(kMinimal),
       "an IPv4-mapped address is written as the IPv4 address"},
      {std::string(kMinimal) + "limits:\n  max_concurrent: 0\n", "limits.max_concurrent"},
      {std::string(kMinimal) + "limits:\n  body_limit: 2MB\n", "limits.body_limit"},
      {std::string(kMinimal) + "limits:\n  request_timeout: 500ms\n", "limits.request_timeout"},
      {std::string(kMinimal) + "limits:\n  answer_grace: 4s\n", "limits.answer_grace"},
      {std::string(kMinimal) + "log_level: loud\n", "unknown log level \"loud\""},
      {std::string(kMinimal) + "cors:\n  allow_origins: ['*']\n", "is not an origin like https://app.example.com"},
      {"tenants:\n  - name: a\n", "node.yaml:2:5: tenants[0]: missing key 'profile'"},
      {"tenants:\n  - {name: a, profile: default, max_requests: 0}\n", "tenants[0].max_requests"},
      {"- a\n", "the top level must be a map of node settings"},
      {std::string(kMinimal) + "metrics: {}\n", "metrics: give the token /metrics asks for: token or token_file"},
      {std::string(kMinimal) + "metrics:\n  token: 0123456789abcdef0\n  token_file: x\n",
       "give either token or token_file, not both"},
      {"tenants:\n  - {name: a, token: 0123456789abcdef0, profile: default}\nmetrics: {token: 0123456789abcdef0}\n",
       "the metrics token is a tenant's token: a tenant would read every tenant's figures"},
      {std::string(kMinimal) + "metrics: {token: short}\n", "metrics.token: a token must have 16 to 4096 characters"},
      {"tenants:\n  - {name: a, token: 'abc%41def0123456789', profile: default}\n",
       "node.yaml:2:22: tenants[0].token: a token may not contain %: character 4 of 19 is one, and the node refuses a "
       "% "
       "in an Authorization header"},
  };
  for (const auto& tc : cases) {
    std::string e = load_error(tc.text);
    EXPECT_NE(e.find(tc.error), std::string::npos) << tc.text << "\n  got: " << e << "\n  want: " << tc.error;
  }
}

TEST(NodeConfig, AMetricsTokenIsReadAndNoneMeansOpenMetrics) {
  EXPECT_EQ(load(kMinimal).metrics_token, "");
  EXPECT_EQ(load(std::string(kMinimal) + "metrics:\n  token: metrics-token-0123456789\n").metrics_token,
            "metrics-token-0123456789");
}

TEST(NodeConfig, ListenersOnOnePortWithDistinctAddressesAreFine) {
  NodeConfig c = load(
      "listeners:\n  - address: 127.0.0.1:1\n  - address: 127.0.0.2:1\n  - address: '[::1]:1'\n"
      "  - address: '[0:0::0001]:2'\n" +
      std::string(kMinimal));
  ASSERT_EQ(c.listeners.size(), 4u);
  EXPECT_EQ(c.listeners[2].address(), "[::1]:1");
  EXPECT_EQ(c.listeners[3].address(), "[::1]:2") << "one spelling per address";
}

TEST(NodeConfig, WhatAListenerBeyondLoopbackOpensToAnyoneIsWarnedOf) {
  const std::string tenants = "default_tenant: public\n" + std::string(kMinimal);
  EXPECT_TRUE(config_warnings(load("listeners:\n  - address: 127.0.0.2:1\n  - address: '[::1]:1'\n" + tenants)).empty())
      << "loopback only";
  EXPECT_EQ(config_warnings(load("listeners:\n  - address: 0.0.0.0:1\n  - address: 127.0.0.1:2\n" + tenants)),
            (std::vector<std::string>{"listener 0.0.0.0:1 runs code as tenant public for anyone who can reach it, "
                                      "without a token",
                                      "/metrics answers anyone who can reach a listener that is not loopback (every "
                                      "tenant's figures); set metrics.token"}));
  EXPECT_TRUE(config_warnings(load("listeners:\n  - address: '[::]:1'\n" +
                                   std::string("tenants:\n  - {name: a, token: a-token-0123456789abcdef, profile: "
                                               "default}\nmetrics: {token: metrics-token-0123456789}\n")))
                  .empty())
      << "a token is asked for everything";
}

// The warm pool starts the fork server: a profile asking for one on a node
// without a pool got cold runs, and --check said nothing.
TEST(NodeConfig, AForkServerWithoutAWarmPoolIsWarnedOf) {
  const std::string dir = ::testing::TempDir() + "/nsbox-fork-warning";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/forky.yaml") << "name: forky\nextends: default\nfork_server: [python]\n"; }
  const std::string tenants = "tenants:\n  - {name: a, token: a-token-0123456789abcdef, profile: " + dir +
                              "/forky.yaml}\n  - {name: b, token: b-token-0123456789abcdef, profile: default}\n";
  EXPECT_EQ(config_warnings(load(tenants)),
            (std::vector<std::string>{"tenants a have fork_server in their profiles, but limits.pool_size is 0: no "
                                      "fork server is started and their runs start cold; set pool_size to 1 or more"}));
  EXPECT_TRUE(config_warnings(load(tenants + "limits:\n  pool_size: 1\n")).empty());
  std::filesystem::remove_all(dir);
}

TEST(NodeConfig, InputThatMadeYamlCppLoopIsRefused) {
  // Found by tests/fuzz: yaml-cpp's LoadAll allocates forever on this.
  std::string e = load_error("  ,- a[dress:,Y}\n.nandefgins: [\"htt[mpleM-k\"]}\n");
  EXPECT_NE(e.find("node.yaml:"), std::string::npos) << e;
}

TEST(NodeConfig, TokenFilesMustBePrivate) {
  auto dir = std::filesystem::temp_directory_path() / ("nsbox-node-unit-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string token = (dir / "token").string();
  std::ofstream(token) << "file-token-0123456789abcdef\n";
  ::chmod(token.c_str(), 0644);
  const std::string text = "tenants:\n  - name: a\n    token_file: token\n    profile: default\n";
  const std::string file = (dir / "node.yaml").string();
  try {
    load_node_config_text(text, file, repo_profiles());
    ADD_FAILURE() << "a world-readable token file was accepted";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("is accessible to group or others (mode 644); chmod 600 it"),
              std::string::npos)
        << e.what();
  }
  ::chmod(token.c_str(), 0600);
  NodeConfig c = load_node_config_text(text, file, repo_profiles());
  EXPECT_EQ(c.tenants[0].token, "file-token-0123456789abcdef") << "the trailing newline is not part of it";
  // A file that is not one token on one line says which, once, and never
  // quotes the token.
  for (const auto& [content, says] : std::vector<std::pair<std::string, std::string>>{
           {"file-token-0123456789abcdef  \n", "character 28 of 29 is a space"},
           {"file-token-0123456789abcdef\nsecond line\n", "holds more than one line: it must hold the token alone"}}) {
    std::ofstream(token, std::ios::trunc) << content;
    try {
      load_node_config_text(text, file, repo_profiles());
      ADD_FAILURE() << "accepted: " << content;
    } catch (const ProfileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find("token_file: tenants[0].token_file"), std::string::npos) << "the key said twice: " << what;
      EXPECT_EQ(what.find("0123456789"), std::string::npos) << "the token quoted: " << what;
    }
  }
  std::filesystem::remove_all(dir);
}

// The node appends to its audit log: pointed at its token file (or its
// config), it would corrupt it and refuse its own next start.
TEST(NodeConfig, TheAuditLogCannotBeAFileTheNodeReads) {
  auto dir = std::filesystem::temp_directory_path() / ("nsbox-node-audit-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string token = (dir / "token").string();
  std::ofstream(token) << "file-token-0123456789abcdef\n";
  ::chmod(token.c_str(), 0600);
  const std::string file = (dir / "node.yaml").string();
  std::ofstream(file) << "";
  const std::string tenants = "tenants:\n  - name: a\n    token_file: token\n    profile: default\n";
  for (const std::string& target : {std::string("token"), token, std::string("node.yaml")}) {
    try {
      load_node_config_text(tenants + "audit_log: " + target + "\n", file, repo_profiles());
      ADD_FAILURE() << "audit_log " << target << " was accepted";
    } catch (const ProfileError& e) {
      EXPECT_NE(std::string(e.what()).find("which the node reads: give the audit log a file of its own"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(load_node_config_text(tenants + "audit_log: audit.log\n", file, repo_profiles()).audit_log,
            (dir / "audit.log").string());
  std::filesystem::remove_all(dir);
}

TEST(NodeConfig, SchemaKeysAreDocumented) {
  std::ifstream in(std::string(NSBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  std::string doc((std::istreambuf_iterator<char>(in)), {});
  // Each key in backticks as its full dotted path (a section as the start of one).
  for (const auto& key : node_config_schema_keys())
    EXPECT_NE(doc.find("`" + key), std::string::npos) << key << " is not in docs/OPERATIONS.md";
}

TEST(ConstantTimeEqual, ComparesContentAndLength) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(DecodeRunRequest, AcceptsThePlatformsRequest) {
  auto d = decode_run_request(R"({"code": "x", "inputs": {"b": 1, "a": 2}, "timeout": 2.5, "language": "javascript"})",
                              std::nullopt);
  ASSERT_TRUE(d.request) << d.error;
  EXPECT_EQ(d.request->exec.language, Language::kJavaScript);
  EXPECT_EQ(d.request->exec.code, "x");
  EXPECT_EQ(d.request->exec.inputs.dump(), R"({"b":1,"a":2})") << "input order is kept";
  EXPECT_EQ(d.request->timeout, std::chrono::milliseconds(2500));
  d = decode_run_request(R"({"code": "x", "inputs": null, "timeout": null})", std::nullopt);
  ASSERT_TRUE(d.request);
  EXPECT_EQ(d.request->exec.language, Language::kPython) << "python is the default";
  EXPECT_FALSE(d.request->timeout);
  EXPECT_TRUE(d.request->exec.inputs.empty());
  d = decode_run_request(R"({"code": "x"})", Language::kJavaScript);
  ASSERT_TRUE(d.request);
  EXPECT_EQ(d.request->exec.language, Language::kJavaScript) << "a pinned listener's language";
}

TEST(DecodeRunRequest, RefusalsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "request body is not valid JSON"},
      {"{", "request body is not valid JSON"},
      {"\"code\"", "request body must be a JSON object"},
      {R"({"code": ["x"]})", "\"code\" must be a string"},
      {R"({"code": "x", "inputs": "a=1"})", "\"inputs\" must be a JSON object"},
      {R"({"code": "x", "timeout": true})", "\"timeout\" must be a number of seconds"},
      {R"({"code": "x", "timeout": 0})", "\"timeout\" must be at least 0.01 and at most 86400 seconds"},
      {R"({"code": "x", "timeout": 0.001})", "\"timeout\" must be at least 0.01 and at most 86400 seconds"},
      {R"({"code": "x", "timeout": 1e-300})", "\"timeout\" must be at least 0.01 and at most 86400 seconds"},
      {R"({"code": "x", "timeout": 1e300})", "\"timeout\" must be at least 0.01"},
      {R"({"code": "x", "language": null, "inputs": {}, "timeout": 1, "extra": 1})", ""},
  };
  for (const auto& [body, error] : cases) {
    auto d = decode_run_request(body, std::nullopt);
    if (error.empty()) {
      EXPECT_TRUE(d.request) << body << ": " << d.error;
      continue;
    }
    EXPECT_FALSE(d.request) << body;
    EXPECT_FALSE(d.unsupported_language);
    EXPECT_NE(d.error.find(error), std::string::npos) << body << " -> " << d.error;
  }
}

TEST(JsonNestingDepth, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1"), 0u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[\"[["})"), 1u) << "brackets in strings do not count";
  EXPECT_EQ(json_nesting_depth(std::string(5000, '[') + std::string(5000, ']')), kMaxJsonDepth + 1);
  EXPECT_EQ(json_nesting_depth("[[]][[]]"), 2u);
}

// Python's json carries any integer; nlohmann holds -2^63..2^64-1 as
// integers and turns anything wider into a double, silently.
TEST(JsonIntegerBeyond64Bits, FindsTheIntegersNlohmannWouldTurnIntoFloats) {
  EXPECT_EQ(json_integer_beyond_64_bits("18446744073709551615"), std::nullopt);
  EXPECT_EQ(json_integer_beyond_64_bits("18446744073709551616"), "18446744073709551616");
  EXPECT_EQ(json_integer_beyond_64_bits("[-9223372036854775808]"), std::nullopt);
  EXPECT_EQ(json_integer_beyond_64_bits("[-9223372036854775809]"), "-9223372036854775809");
  EXPECT_EQ(json_integer_beyond_64_bits("99999999999999999999"), "99999999999999999999") << "20 digits";
  EXPECT_EQ(json_integer_beyond_64_bits(R"({"s": "123456789012345678901234567890", "f": [1.5e300, 1e30, -0.5e-7]})"),
            std::nullopt)
      << "strings and floats are carried as they were";
  EXPECT_EQ(json_integer_beyond_64_bits(R"([true, false, null, 0, -0, 1E5])"), std::nullopt);
  EXPECT_EQ(json_integer_beyond_64_bits(R"({"a":1,"n":123456789012345678901234567890})"),
            "123456789012345678901234567890");
  EXPECT_EQ(json_integer_beyond_64_bits(std::string(400, '9')), std::string(40, '9') + "...");
}

TEST(JsonValueCount, CountsElementsAndMembersOutsideStrings) {
  EXPECT_EQ(json_value_count("1"), 1u);
  EXPECT_EQ(json_value_count("[]"), 2u) << "an upper bound: the array and room for one element";
  EXPECT_EQ(json_value_count(R"({"a": [1, 2], "b": 3})"), 5u);
  EXPECT_EQ(json_value_count(R"(["a,b,[{", "\",,"])"), 3u) << "commas and brackets in strings do not count";
  std::string many = "[";
  for (size_t i = 0; i < kMaxJsonValues; ++i) many += "[],";
  EXPECT_EQ(json_value_count(many), kMaxJsonValues + 1);
}

TEST(DecodeRunRequest, RefusesMoreThanAMillionValuesBeforeParsing) {
  std::string inputs = "[";
  for (size_t i = 0; i < kMaxJsonValues; ++i) inputs += "[],";
  inputs += "[]]";
  auto d = decode_run_request(R"({"code": "x", "inputs": {"a": )" + inputs + "}}", std::nullopt);
  EXPECT_FALSE(d.request);
  EXPECT_EQ(d.error, "request body is too large: more than 1000000 values (array elements and object members)");
}

TEST(LoneSurrogateEscapes, AreReplacedAndPairsAndOtherEscapesKept) {
  EXPECT_EQ(replace_lone_surrogate_escapes(R"({"a": "x\udcffy"})"), R"({"a": "x\ufffdy"})");
  EXPECT_EQ(replace_lone_surrogate_escapes(R"(["\uD800", "\ud800\u0041"])"), R"(["\ufffd", "\ufffd\u0041"])")
      << "a high surrogate without its low half, upper or lower case";
  EXPECT_EQ(replace_lone_surrogate_escapes(R"(["\ud83d\ude00"])"), R"(["\ud83d\ude00"])") << "a pair is one character";
  EXPECT_EQ(replace_lone_surrogate_escapes(R"(["\ude00\ud83d"])"), R"(["\ufffd\ufffd"])")
      << "a pair in the wrong order";
  EXPECT_EQ(replace_lone_surrogate_escapes(R"(["\\ud800", "\"\\\ud800"])"), R"(["\\ud800", "\"\\\ufffd"])")
      << "an escaped backslash before ud800 is text, not an escape";
  EXPECT_EQ(replace_lone_surrogate_escapes(R"({"\udc00": 1})"), R"({"\ufffd": 1})") << "keys too";
  EXPECT_EQ(replace_lone_surrogate_escapes(R"("\ud8)"), R"("\ud8)") << "a cut escape is left to the parser";
  // What the parser refused before, it now reads.
  auto j = nlohmann::json::parse(replace_lone_surrogate_escapes(R"({"a": "\udcff"})"), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["a"], "\xEF\xBF\xBD");
}

TEST(DecodeRunRequest, UnknownKeysAreIgnoredLikeThePlatformOrNamedWhenAsked) {
  const std::string body = R"({"code": "x", "timout": 5})";
  auto d = decode_run_request(body, std::nullopt);
  ASSERT_TRUE(d.request) << "/run ignores them, as the platform's servers do";
  EXPECT_FALSE(d.request->timeout);
  d = decode_run_request(body, std::nullopt, true);
  EXPECT_FALSE(d.request);
  EXPECT_EQ(d.error, "unknown key \"timout\": a run request has code, inputs, timeout and language");
  d = decode_run_request(R"({"code": "x", "inputs": {"any": 1}, "timeout": 1, "language": "python"})", std::nullopt,
                         true);
  EXPECT_TRUE(d.request) << d.error;
}

TEST(DecodeRunRequest, ANulByteIsRefusedNotTheEndOfTheBody) {
  // nlohmann stops at a NUL byte: what followed it was ignored.
  const std::string body = std::string(R"({"code": "x"})") + '\0' + "garbage";
  auto d = decode_run_request(body, std::nullopt);
  EXPECT_FALSE(d.request);
  EXPECT_EQ(d.error, "request body is not valid JSON: a NUL byte at offset 13");
}

TEST(DecodeRunRequest, RefusesDeepNestingBeforeParsing) {
  std::string body = R"({"code": "x", "inputs": {"a": )" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  auto d = decode_run_request(body, std::nullopt);
  EXPECT_FALSE(d.request);
  EXPECT_EQ(d.error, "request body is nested deeper than 1000 levels");
}

TEST(DecodeRunRequest, NumbersTooLargeForADoubleAreA400NotAnException) {
  // Found by tests/fuzz: nlohmann reports 1e3084 as out_of_range, not parse_error.
  auto d = decode_run_request(R"({"timeout": 1e3084, "code": "x"})", std::nullopt);
  EXPECT_FALSE(d.request);
  EXPECT_NE(d.error.find("request body is not valid JSON: number overflow"), std::string::npos) << d.error;
}

TEST(ParseUntrustedJson, GivesTheDocumentOrWhyNotWithoutThrowing) {
  ParsedJson ok = parse_untrusted_json(R"({"a": [1, "x"]})");
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.value.dump(), R"({"a":[1,"x"]})");
  // Any document, not only objects: the callers say what they need.
  EXPECT_EQ(parse_untrusted_json("[]").value.dump(), "[]");
  EXPECT_EQ(parse_untrusted_json(std::string("{}") + '\0').error, "not valid JSON: a NUL byte at offset 2");
  EXPECT_EQ(parse_untrusted_json(std::string(1001, '[') + std::string(1001, ']')).error,
            "nested deeper than 1000 levels");
  EXPECT_EQ(parse_untrusted_json(std::string(1000, '[') + std::string(1000, ']')).error, "");
  // Python's and JavaScript's parsers take a lone surrogate: it arrives as U+FFFD.
  const ParsedJson lone = parse_untrusted_json(R"({"s": "a\ud800b", "t": "\ud83d\ude00"})");
  EXPECT_EQ(lone.error, "");
  EXPECT_EQ(lone.value.dump(),
            "{\"s\":\"a\xEF\xBF\xBD"
            "b\",\"t\":\"\xF0\x9F\x98\x80\"}");
  EXPECT_EQ(parse_untrusted_json(R"({"a": 1, "a": "\ud800"})").error,
            "ambiguous: the key \"a\" appears twice in one object")
      << "the second reading still refuses a key twice";
  EXPECT_EQ(parse_untrusted_json(R"({"n": 123456789012345678901234567890})").error,
            "out of range: the integer 123456789012345678901234567890 is beyond the 64 bits nsbox carries exactly "
            "(-2^63 to 2^64-1) and would become a float; send it as a string");
  // nlohmann's own reasons, without its "[json.exception...] " prefix.
  EXPECT_EQ(parse_untrusted_json("1e999").error.rfind("not valid JSON: number overflow", 0), 0u);
  const std::string syntax = parse_untrusted_json("{").error;
  EXPECT_EQ(syntax.rfind("not valid JSON: ", 0), 0u) << syntax;
  EXPECT_EQ(syntax.find("[json.exception"), std::string::npos) << syntax;
}

// A key twice in one object is read as the last by nlohmann and maybe as
// the first by a gateway in front: refused, at any depth.
TEST(ParseUntrustedJson, AKeyTwiceInOneObjectIsRefused) {
  EXPECT_EQ(parse_untrusted_json(R"({"code": "x", "code": 5})").error,
            "ambiguous: the key \"code\" appears twice in one object");
  // Deeper keys are the caller's data: not named.
  EXPECT_EQ(parse_untrusted_json(R"({"inputs": {"a": {"Jane Roe": 1, "Jane Roe": 2}}})").error,
            "ambiguous: a key of a nested object appears twice in one object");
  EXPECT_EQ(parse_untrusted_json(R"({"inputs": {"": 1, "": 2}})").error,
            "ambiguous: a key of a nested object appears twice in one object");
  EXPECT_EQ(parse_untrusted_json(R"({"": 1, "": 2})").error, "ambiguous: the key \"\" appears twice in one object");
  EXPECT_EQ(parse_untrusted_json(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]})").error, "")
      << "the same key in different objects is fine";
  const DecodedRequest d =
      decode_run_request(R"j({"code": "def main(a): return 1", "code": "print(1)"})j", std::nullopt);
  EXPECT_EQ(d.error, "request body is ambiguous: the key \"code\" appears twice in one object");
}

// The error is the answer's and the audit log's: it says where the
// document broke, never the bytes it read there (an input may be
// personal data).
TEST(ParseUntrustedJson, AnErrorSaysWhereButNotWhatWasRead) {
  for (const std::string& text : {std::string(R"({"x": "Jane Roe, MRN 5551234)") + '\x01' + "\"}",
                                  std::string(R"({"x": "Jane Roe, MRN 5551234", "y": tru})"),
                                  std::string(R"({"MRN 5551234" 1})"), std::string("[5551234e999]")}) {
    const std::string error = parse_untrusted_json(text).error;
    EXPECT_EQ(error.rfind("not valid JSON: ", 0), 0u) << error;
    EXPECT_EQ(error.find("5551234"), std::string::npos) << error;
  }
  EXPECT_EQ(parse_untrusted_json(R"({"MRN 5551234" 1})").error,
            "not valid JSON: parse error at line 1, column 16: syntax error while parsing object separator - "
            "unexpected number literal; expected ':'");
  EXPECT_EQ(parse_untrusted_json("[1e999]").error, "not valid JSON: number overflow");
}

TEST(DecodeRunRequest, UnsupportedLanguages) {
  auto d = decode_run_request(R"({"code": "x", "language": "ruby"})", std::nullopt);
  EXPECT_TRUE(d.unsupported_language);
  EXPECT_EQ(d.error, "Unsupported language: ruby");
  d = decode_run_request(R"({"code": "x", "language": "python"})", Language::kJavaScript);
  EXPECT_TRUE(d.unsupported_language) << "a JS-only listener refuses python like the platform's JS server";
  EXPECT_EQ(unsupported_language_answer(d.error),
            "{\"output\": {\"return\": null, \"error\": \"Unsupported language: python\"}}");
}

TEST(PlatformJson, WritesWhatPythonsJsonDumpsWrites) {
  EXPECT_EQ(platform_answer(20, nullptr), "{\"return\": 20, \"error\": null}");
  EXPECT_EQ(platform_answer(nullptr, "No code provided."), "{\"return\": null, \"error\": \"No code provided.\"}");
  json v = json::parse(R"({"z": [1, {"a": null}], "b": "é\n", "n": 1.5, "t": true, "e": {}, "l": []})");
  EXPECT_EQ(dump_platform_json(v), R"({"z": [1, {"a": null}], "b": "é\n", "n": 1.5, "t": true, "e": {}, "l": []})");
}

TEST(Admission, SlotsThenQueueThenFull) {
  Admission a(1, 1);
  EXPECT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
  std::atomic<bool> second_admitted{false};
  std::thread waiter([&] {
    if (a.acquire() == Admission::Verdict::kAdmitted) second_admitted = true;
  });
  while (a.queued() == 0) std::this_thread::yield();
  EXPECT_EQ(a.acquire(), Admission::Verdict::kFull) << "slot and queue taken";
  a.release();
  waiter.join();
  EXPECT_TRUE(second_admitted);
  EXPECT_EQ(a.running(), 1u);
  a.release();
  EXPECT_TRUE(a.wait_idle(std::chrono::steady_clock::now()));
}

TEST(TenantShares, EachTenantUpToItsOwnBoundAndNoneWithout) {
  TenantShares shares;
  EXPECT_TRUE(shares.try_take("a", 2));
  EXPECT_TRUE(shares.try_take("a", 2));
  EXPECT_FALSE(shares.try_take("a", 2)) << "a holds its two";
  EXPECT_EQ(shares.held("a"), 2u);
  EXPECT_TRUE(shares.try_take("b", 2)) << "b's share is its own";
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(shares.try_take("c", 0)) << "0: no bound of its own";
  shares.give_back("a");
  EXPECT_TRUE(shares.try_take("a", 2)) << "one given back, one more taken";
  {
    ASSERT_TRUE(shares.try_take("d", 1));
    TenantShare held(shares, "d");
    EXPECT_FALSE(shares.try_take("d", 1));
  }
  EXPECT_EQ(shares.held("d"), 0u) << "given back when the share goes";
}

TEST(Admission, WaitersAreServedInArrivalOrder) {
  Admission a(1, 8);
  ASSERT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 5; ++i) {
    waiters.emplace_back([&, i] {
      ASSERT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      a.release();
    });
    while (a.queued() != static_cast<uint32_t>(i + 1)) std::this_thread::yield();  // queued in order i
  }
  a.release();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Admission, TwoSlotsFreedAtOnceAdmitTwoWaiters) {
  // Only the first waiter is woken on a release; once admitted it must wake
  // the next when a slot is still free.
  Admission a(2, 8);
  ASSERT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
  ASSERT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
  std::atomic<int> admitted{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&] {
      if (a.acquire() == Admission::Verdict::kAdmitted) ++admitted;
    });
  }
  while (a.queued() != 2) std::this_thread::yield();
  a.release();
  a.release();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (admitted.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(admitted.load(), 2) << "a waiter was left waiting with a slot free";
  a.close();  // frees a waiter left behind, so that the test ends either way
  for (auto& t : waiters) t.join();
  EXPECT_EQ(a.running(), static_cast<uint32_t>(admitted.load()));
  EXPECT_EQ(a.queued(), 0u);
}

TEST(Admission, CloseWakesWaitersAndRefusesNewOnes) {
  Admission a(1, 4);
  ASSERT_EQ(a.acquire(), Admission::Verdict::kAdmitted);
  Admission::Verdict waited = Admission::Verdict::kAdmitted;
  std::thread waiter([&] { waited = a.acquire(); });
  while (a.queued() == 0) std::this_thread::yield();
  a.close();
  waiter.join();
  EXPECT_EQ(waited, Admission::Verdict::kClosed);
  EXPECT_EQ(a.acquire(), Admission::Verdict::kClosed);
  EXPECT_FALSE(a.wait_idle(std::chrono::steady_clock::now() + std::chrono::milliseconds(10)));
  a.release();
  EXPECT_TRUE(a.wait_idle(std::chrono::steady_clock::now()));
}

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.run_finished("acme", "python", "ok", 0.02);
  m.run_finished("acme", "python", "timeout", 5.0);
  m.run_finished("b\"x", "javascript", "oom", 0.3);
  m.rejected("overload");
  m.egress_finished("acme", {{"allowed", 2}, {"denied", 1}, {"failed", 0}, {"bytes_sent", 10}, {"bytes_received", 99}});
  m.egress_finished("acme", nullptr);  // a run without egress
  std::string text = m.render(
      {.running = 1,
       .queued = 2,
       .max_running = 4,
       .max_queued = 8,
       .pool = {
           .idle = 3, .hits = 7, .waits = 5, .misses = 1, .refills = 4, .refill_ms_total = 1500, .fork_servers = 2}});
  EXPECT_NE(text.find("nsbox_runs_total{tenant=\"acme\",language=\"python\",status=\"ok\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_runs_total{tenant=\"b\\\"x\",language=\"javascript\",status=\"oom\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("nsbox_run_duration_seconds_bucket{language=\"python\",le=\"0.025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_run_duration_seconds_bucket{language=\"python\",le=\"5\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_run_duration_seconds_bucket{language=\"python\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_timeouts_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_oom_kills_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_rejected_requests_total{reason=\"overload\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_rejected_requests_total{reason=\"unauthorized\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_sandboxes_running 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"denied\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_egress_bytes_total{tenant=\"acme\",direction=\"received\"} 99\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_idle 3\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_hits_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_waits_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_misses_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_refill_seconds_total 1.5\n"), std::string::npos);
  EXPECT_NE(text.find("nsbox_pool_fork_servers 2\n"), std::string::npos);
}

TEST(Audit, EveryRecordNamesTheNodeOnceItIsSet) {
  EXPECT_FALSE(event_record("node_started").contains("node")) << "not a node: no node id";
  set_audit_node_id("0123456789abcdef");
  const auto started = event_record("node_started");
  const auto run = audit_record(AuditContext{}, json::object());
  const auto refused = refusal_record(RefusalContext{});
  const auto egress = egress_audit_records(
      AuditContext{}, json::parse(R"({"network": {"connections": [{"time": "2026-12-06T01:00:00.000Z"}]}})"));
  set_audit_node_id("");
  for (const auto& r : {started, run, refused, egress.at(0)}) {
    EXPECT_EQ(r["node"], "0123456789abcdef") << r;
    EXPECT_EQ(std::next(r.begin(), 2).key(), "node") << r;
  }
  EXPECT_EQ(egress[0]["time"], "2026-12-06T01:00:00.000Z") << "the proxy's decision time stays";
}

TEST(Audit, RecordCarriesTheRunsFacts) {
  AuditContext ctx{.run_id = "r1",
                   .tenant = "acme",
                   .api = "run",
                   .client = "127.0.0.1",
                   .code_sha256 = "abc",
                   .profile_sha256 = "def",
                   .rootfs = "/var/lib/nsbox/rootfs/default.5db4d2ad1d1a",
                   .profile = "default",
                   .language = "python",
                   .input_bytes = 12,
                   .duration_s = 0.0425,
                   .answer_bytes = 31};
  json result = json::parse(R"({"return": 1, "error": null, "status": "ok", "error_type": null,
    "usage": {"wall_ms": 40, "cpu_ms": 30, "peak_memory_bytes": 4096}, "limits_hit": ["output"],
    "warnings": [], "profile": "default", "language": "python", "exit_code": 0, "signal": null,
    "stdout": "hello\n", "stderr": "", "stdout_truncated": false, "stderr_truncated": true,
    "limits": {"wall_ms": 30000, "cpu_ms": 30000, "memory_bytes": 536870912, "pids": 128},
    "artifacts": [{"name": "out.csv", "size": 3, "sha256": "ab", "content_base64": "eHl6"}],
    "artifacts_refused": ["big.bin: over the byte cap, not returned"]})");
  json r = audit_record(ctx, result);
  // What left the sandbox, by size and digest, never its content.
  EXPECT_EQ(r["answer_bytes"], 31);
  EXPECT_EQ(r["stdout_bytes"], 6);
  EXPECT_EQ(r["stderr_truncated"], true);
  EXPECT_EQ(r["limits"]["memory_bytes"], 536870912);
  EXPECT_EQ(r["artifacts"], json::parse(R"([{"name": "out.csv", "size": 3, "sha256": "ab"}])"));
  EXPECT_EQ(r["artifacts_refused"], 1);
  EXPECT_EQ(r.dump().find("eHl6"), std::string::npos) << "no artifact content";
  EXPECT_EQ(r.dump().find("hello"), std::string::npos) << "no output";
  EXPECT_EQ(r["run_id"], "r1");
  EXPECT_EQ(r["tenant"], "acme");
  EXPECT_EQ(r["credential"], "listener") << "a tenant not known by its token";
  EXPECT_EQ(r["profile"], "default");
  EXPECT_EQ(r["language"], "python");
  EXPECT_EQ(r["code_sha256"], "abc");
  EXPECT_EQ(r["profile_sha256"], "def");
  EXPECT_EQ(r["rootfs"], "/var/lib/nsbox/rootfs/default.5db4d2ad1d1a");
  EXPECT_EQ(r["input_bytes"], 12);
  EXPECT_EQ(r["status"], "ok");
  EXPECT_EQ(r["exit_code"], 0);
  EXPECT_EQ(r["duration_ms"], 43);
  EXPECT_EQ(r["cpu_ms"], 30);
  EXPECT_EQ(r["peak_memory_bytes"], 4096);
  EXPECT_EQ(r["limits_hit"], json::array({"output"}));
  EXPECT_EQ(r["time"].get<std::string>().size(), 24u);
}

// A worker killed mid-run sends no result: the node's answer for it names
// neither profile nor language, yet the record of the run must, as its
// run_started record did.
TEST(Audit, ARunWhoseWorkerDiedIsRecordedWithItsProfileAndLanguage) {
  AuditContext ctx;
  ctx.run_id = "r2";
  ctx.tenant = "acme";
  ctx.profile = "strict";
  ctx.language = "javascript";
  const json died = {{"return", nullptr},
                     {"error", "The sandbox could not be started: worker ended without a result"},
                     {"status", "error"},
                     {"error_type", "sandbox"}};
  const json r = audit_record(ctx, died);
  EXPECT_EQ(r["profile"], "strict") << r;
  EXPECT_EQ(r["language"], "javascript") << r;
  const json started = run_started_record(ctx);
  EXPECT_EQ(started["profile"], r["profile"]);
  EXPECT_EQ(started["language"], r["language"]);
}

TEST(Audit, ARefusalRecordNamesWhoAskedForWhatAndWhyButNoHeaderValue) {
  RefusalContext ctx{.client = "203.0.113.7",
                     .method = "POST",
                     .path = "/run" + std::string(300, 'x'),
                     .tenant = "",
                     .status = 401,
                     .reason = "unauthorized",
                     .message = "Unsupported language: " + std::string(2 << 20, 'x')};
  json r = refusal_record(ctx);
  EXPECT_EQ(r["event"], "refused");
  EXPECT_EQ(r["client"], "203.0.113.7");
  EXPECT_EQ(r["method"], "POST");
  EXPECT_EQ(r["path"].get<std::string>().size(), kAuditFieldMax) << "a long path is cut";
  EXPECT_TRUE(r["tenant"].is_null()) << "not authenticated";
  EXPECT_EQ(r["status"], 401);
  EXPECT_EQ(r["reason"], "unauthorized");
  EXPECT_EQ(r["message"].get<std::string>().size(), kAuditFieldMax) << "a message echoing the request is cut";
  EXPECT_EQ(r["message"].get<std::string>().rfind("Unsupported language: xx", 0), 0u);
  ctx.tenant = "acme";
  EXPECT_EQ(refusal_record(ctx)["tenant"], "acme");
}

TEST(Audit, RefusalsPastTheBudgetOfASecondAreCountedNotWritten) {
  using namespace std::chrono_literals;
  RefusalBudget budget(3, 3);
  const auto t0 = RefusalBudget::Clock::now();
  EXPECT_TRUE(budget.take(t0));
  EXPECT_TRUE(budget.take(t0 + 100ms));
  EXPECT_TRUE(budget.take(t0 + 999ms));
  EXPECT_FALSE(budget.take(t0 + 999ms));
  EXPECT_FALSE(budget.take(t0 + 999ms));
  EXPECT_EQ(budget.take_suppressed().count, 2u);
  EXPECT_EQ(budget.take_suppressed().count, 0u) << "the count starts again";
  EXPECT_TRUE(budget.take(t0 + 1000ms)) << "a new second, a new budget";
  EXPECT_TRUE(budget.take(t0 + 1500ms));
  EXPECT_TRUE(budget.take(t0 + 1999ms));
  EXPECT_FALSE(budget.take(t0 + 1999ms));
  EXPECT_EQ(budget.take_suppressed().count, 1u);
}

// One client flooding the log takes its share of a second, not all of it:
// another client's refusal that second is still written, and what is not
// written is counted by reason and by client.
TEST(Audit, OneClientTakesAtMostItsShareOfASecondsRefusalLines) {
  RefusalBudget budget(4, 2);
  const auto t0 = RefusalBudget::Clock::now();
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "unauthorized"));
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "unauthorized"));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(budget.take(t0, "10.0.0.1", "unauthorized"));
  EXPECT_TRUE(budget.take(t0, "10.0.0.2", "forbidden")) << "another client's refusal is written";
  EXPECT_TRUE(budget.take(t0, "10.0.0.3", "unauthorized"));
  EXPECT_FALSE(budget.take(t0, "10.0.0.4", "too_large")) << "the second's budget is spent";
  const RefusalBudget::Suppressed s = budget.take_suppressed();
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.by_reason, (std::map<std::string, uint64_t>{{"unauthorized", 5}, {"too_large", 1}}));
  EXPECT_EQ(s.by_client, (std::map<std::string, uint64_t>{{"10.0.0.1", 5}, {"10.0.0.4", 1}}));
  EXPECT_EQ(s.other_clients, 0u);
  // Past kSuppressedClientsNamed clients, the rest are counted together.
  RefusalBudget none(0, 0);
  for (size_t i = 0; i < kSuppressedClientsNamed + 3; ++i) none.take(t0, "c" + std::to_string(i), "unauthorized");
  const RefusalBudget::Suppressed many = none.take_suppressed();
  EXPECT_EQ(many.by_client.size(), kSuppressedClientsNamed);
  EXPECT_EQ(many.other_clients, 3u);
}

// Behind a gateway every request comes from one address: an authenticated
// tenant's refusals are shared out by tenant, from a budget that anonymous
// requests cannot spend, and those not written are counted by tenant.
TEST(Audit, ATenantsRefusalsAreNamedWhateverTheAddressAndAnAnonymousFlood) {
  RefusalBudget budget(4, 2);
  const auto t0 = RefusalBudget::Clock::now();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(budget.take(t0, "10.0.0." + std::to_string(i % 2), "unauthorized"));
  EXPECT_FALSE(budget.take(t0, "10.0.0.9", "unauthorized")) << "the anonymous budget is spent";
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "bad_request", "acme"));
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "bad_request", "acme"));
  EXPECT_FALSE(budget.take(t0, "10.0.0.1", "bad_request", "acme")) << "acme's share is spent";
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "overload", "beta")) << "another tenant, the same address";
  EXPECT_TRUE(budget.take(t0, "10.0.0.1", "overload", "beta"));
  EXPECT_FALSE(budget.take(t0, "10.0.0.1", "overload", "gamma")) << "the tenants' budget is spent";
  const RefusalBudget::Suppressed s = budget.take_suppressed();
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.by_tenant, (std::map<std::string, uint64_t>{{"acme", 1}, {"gamma", 1}}));
  EXPECT_EQ(s.by_client, (std::map<std::string, uint64_t>{{"10.0.0.1", 2}, {"10.0.0.9", 1}}));
}

std::vector<json> audit_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// A listener's anonymous tenant is whoever reaches the listener: its
// refusals count by address, so one client cannot spend the lines of the
// tenant's token holders; a token's refusals count by tenant.
TEST(Audit, OnlyATokenNamesTheTenantARefusalIsBudgetedAs) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("nsbox-audit-credential-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  const auto t0 = RefusalBudget::Clock::now();
  RefusalContext ctx{.client = "10.0.0.1",
                     .method = "POST",
                     .path = "/run",
                     .tenant = "acme",
                     .by_token = false,
                     .status = 400,
                     .reason = "bad_request",
                     .message = "bad"};
  {
    AuditLog log(path);
    for (int i = 0; i < 10; ++i) log.refused(refusal_record(ctx), t0);  // anonymous, on acme's listener
    ctx.by_token = true;
    for (int i = 0; i < 3; ++i) log.refused(refusal_record(ctx), t0);  // acme's token, the same address
  }
  const std::vector<json> lines = audit_lines(path);
  std::filesystem::remove(path);
  size_t listener = 0, token = 0;
  json suppressed;
  for (const auto& l : lines) {
    if (l["event"] == "refusals_suppressed") suppressed = l;
    if (l["event"] == "refused") (l["credential"] == "token" ? token : listener) += 1;
  }
  EXPECT_EQ(listener, kRefusalLinesPerClientPerSecond) << "one address's share";
  EXPECT_EQ(token, 3u) << "the token holder's refusals are still named";
  ASSERT_TRUE(suppressed.is_object());
  EXPECT_EQ(suppressed["count"], 10 - kRefusalLinesPerClientPerSecond);
  EXPECT_EQ(suppressed["by_tenant"], json::object()) << "the listener's are counted by address";
}

TEST(Audit, AFloodOfRefusalsIsSaidInOneCountedLineBeforeTheNextLineAndAtClose) {
  using namespace std::chrono_literals;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("nsbox-audit-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  const auto t0 = RefusalBudget::Clock::now();
  RefusalContext ctx{.client = "127.0.0.1",
                     .method = "POST",
                     .path = "/run",
                     .tenant = "",
                     .status = 401,
                     .reason = "unauthorized",
                     .message = "unauthorized: unknown token"};
  {
    AuditLog log(path);
    // Each from a client of its own: one client gets only its share.
    auto from = [&ctx](unsigned i) {
      ctx.client = "10.0.0." + std::to_string(i);
      return refusal_record(ctx);
    };
    for (unsigned i = 0; i < kRefusalLinesPerSecond + 5; ++i) log.refused(from(i), t0);
    log.write_suppressed();
    log.write_suppressed();  // nothing more to say
    for (unsigned i = 0; i < kRefusalLinesPerSecond + 2; ++i) log.refused(from(i), t0 + 1s);
    log.write(json{{"event", "run"}});
    for (unsigned i = 0; i < 7; ++i) log.refused(from(i), t0 + 1s);  // that second's budget is spent
  }
  const std::vector<json> lines = audit_lines(path);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 2 * kRefusalLinesPerSecond + 4);
  EXPECT_EQ(lines[kRefusalLinesPerSecond]["event"], "refusals_suppressed");
  EXPECT_EQ(lines[kRefusalLinesPerSecond]["count"], 5);
  EXPECT_EQ(lines[2 * kRefusalLinesPerSecond + 1]["event"], "refusals_suppressed") << "said before the run's line";
  EXPECT_EQ(lines[2 * kRefusalLinesPerSecond + 1]["count"], 2);
  EXPECT_EQ(lines[2 * kRefusalLinesPerSecond + 2]["event"], "run");
  EXPECT_EQ(lines.back()["event"], "refusals_suppressed") << "said when the log is closed";
  EXPECT_EQ(lines.back()["count"], 7);
  size_t refused = 0;
  for (const auto& l : lines) refused += l["event"] == "refused";
  EXPECT_EQ(refused, 2 * kRefusalLinesPerSecond);
}

// Makes files this process writes stop at bytes, as a full disk would
// (EFBIG, not SIGXFSZ); was gets the limit to put back.
bool limit_file_size(rlim_t bytes, rlimit* was) {
  ::signal(SIGXFSZ, SIG_IGN);
  ::getrlimit(RLIMIT_FSIZE, was);
  rlimit small = *was;
  small.rlim_cur = bytes;
  return ::setrlimit(RLIMIT_FSIZE, &small) == 0;
}

// A file that stops taking writes (here RLIMIT_FSIZE, as a full disk
// would): each record it refuses is counted, a line it cut is ended, and
// the first line written again says how many were lost and why.
TEST(Audit, RecordsAFullFileRefusesAreCountedAndSaidOnceItTakesThemAgain) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("nsbox-audit-full-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  const json record = {{"event", "run"}, {"pad", std::string(280, 'x')}};  // a 308-byte line
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit was{};
    if (!limit_file_size(1000, &was)) ::_exit(10);  // three lines and a third
    AuditLog log(path);
    const uint64_t lost_before = AuditLog::records_lost_in_process();
    for (int i = 0; i < 10; ++i) log.write(record);
    if (log.writable()) ::_exit(11);
    if (AuditLog::records_lost_in_process() - lost_before != 7) ::_exit(12);
    if (log.failure() != std::strerror(EFBIG)) ::_exit(13);
    if (::setrlimit(RLIMIT_FSIZE, &was) != 0) ::_exit(14);
    if (!log.writable()) ::_exit(15);
    if (!log.write(json{{"event", "after"}})) ::_exit(17);
    ::_exit(AuditLog::records_lost_in_process() - lost_before == 7 && log.failure().empty() ? 0 : 16);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the step that failed, in the child";
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(json::parse(lines[i]), record);
  const size_t line_size = record.dump().size() + 1;
  EXPECT_EQ(lines[3], record.dump().substr(0, 1000 - 3 * line_size)) << "the line the limit cut, ended on its own";
  const json lost = json::parse(lines[4]);
  EXPECT_EQ(lost["event"], "audit_records_lost");
  EXPECT_EQ(lost["count"], 7);
  EXPECT_EQ(lost["error"], std::strerror(EFBIG));
  EXPECT_EQ(json::parse(lines[5])["event"], "after");
}

// A run chooses its artifacts' names and count: its record must not grow
// with them (one run wrote a 785 KB line with 64 names 4 KB long).
TEST(Audit, ARunCannotMakeItsRecordAsLargeAsItLikes) {
  json artifacts = json::array();
  std::string long_name;
  for (int i = 0; i < 2000; ++i) long_name += "\u00e9";
  for (size_t i = 0; i < kAuditArtifactsListed + 44; ++i)
    artifacts.push_back({{"name", long_name + std::to_string(i)}, {"size", 0}, {"sha256", "e3b0"}});
  const json r = audit_record(AuditContext{}, json{{"status", "ok"}, {"artifacts", artifacts}});
  ASSERT_EQ(r["artifacts"].size(), kAuditArtifactsListed);
  EXPECT_EQ(r["artifacts_unlisted"], 44);
  for (const auto& a : r["artifacts"]) EXPECT_LE(a["name"].get<std::string>().size(), kAuditFieldMax);
  EXPECT_EQ(r["artifacts"][0]["sha256"], "e3b0");
  const std::string line = r.dump(-1, ' ', true, json::error_handler_t::replace);
  EXPECT_LT(line.size(), kAuditArtifactsListed * 1000) << "as the log writes it, non-ASCII escaped";
}

TEST(Audit, ALogDeletedUnderTheNodeIsMadeAnewAndSaysSoAndAGoneDirectoryStopsRuns) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("nsbox-audit-deleted-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "audit.log").string();
  {
    AuditLog log(path);
    ASSERT_TRUE(log.write(json{{"event", "before"}}));
    ASSERT_EQ(::unlink(path.c_str()), 0);
    EXPECT_TRUE(log.writable()) << "made anew";
    ASSERT_TRUE(log.write(json{{"event", "after"}}));
    std::ifstream in(path);
    std::vector<json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0]["event"], "audit_log_recreated");
    EXPECT_EQ(lines[1]["event"], "after");
    EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

    std::filesystem::remove_all(dir);  // nowhere to make it: nothing may run unaudited
    EXPECT_FALSE(log.writable());
    EXPECT_EQ(log.failure(), std::strerror(ENOENT)) << "said, for the refusals and /health";
    EXPECT_FALSE(log.write(json{{"event", "lost"}}));
    EXPECT_FALSE(log.failure().empty());
  }
  std::filesystem::remove_all(dir);
}

// A reload opens a new log: what the old one could not take is said in the
// new one's first line, not forgotten with the old log.
TEST(Audit, RecordsLostBeforeAReloadAreSaidByTheNewLog) {
  const std::string base =
      (std::filesystem::temp_directory_path() / ("nsbox-audit-reload-" + std::to_string(::getpid()))).string();
  const std::string full = base + "-full", next = base + "-next";
  std::filesystem::remove(full);
  std::filesystem::remove(next);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit was{};
    if (!limit_file_size(100, &was)) ::_exit(10);
    auto old_log = std::make_unique<AuditLog>(full);
    for (int i = 0; i < 3; ++i) old_log->write(json{{"event", "run"}, {"pad", std::string(200, 'x')}});
    if (old_log->writable()) ::_exit(11);
    if (::setrlimit(RLIMIT_FSIZE, &was) != 0) ::_exit(12);
    AuditLog new_log(next);
    new_log.take_lost_from(*old_log);
    old_log.reset();  // with nothing left to say in the old file
    if (!new_log.write(json{{"event", "reload"}})) ::_exit(13);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the step that failed, in the child";
  std::ifstream in(next);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["event"], "audit_records_lost");
  EXPECT_EQ(lines[0]["count"], 3);
  EXPECT_EQ(lines[1]["event"], "reload");
  std::ostringstream old_text;
  old_text << std::ifstream(full).rdbuf();
  EXPECT_EQ(old_text.str().find("audit_records_lost"), std::string::npos) << "said once";
  std::filesystem::remove(full);
  std::filesystem::remove(next);
}

// A FIFO at the log's path (an operator's slip, or a log shipper's pipe)
// must not hold the node's start in open() waiting for a reader.
TEST(Audit, AFifoAtTheLogsPathIsRefusedAtOnce) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("nsbox-audit-fifo-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(10);  // a hang ends as SIGALRM, a failure of the test
    try {
      AuditLog log(path);
    } catch (const std::runtime_error& e) {
      ::_exit(std::string(e.what()).find("audit_log " + path + ": not a regular file") == 0 ? 1 : 2);
    }
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::filesystem::remove(path);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 1) << "2: another error, 3: accepted";
}

TEST(PoolConfig, KeysSeparateProfilesAndLanguagesAndTheConfigRoundTrips) {
  const std::string a = "name: a\n", b = "name: b\n";
  EXPECT_EQ(pool_key(a, Language::kPython), pool_key(a, Language::kPython));
  EXPECT_NE(pool_key(a, Language::kPython), pool_key(a, Language::kJavaScript));
  EXPECT_NE(pool_key(a, Language::kPython), pool_key(b, Language::kPython));
  EXPECT_EQ(pool_key(a, Language::kPython).size(), 64u);  // fits the one-byte length of the job header

  std::vector<PoolEntry> entries = {{pool_key(a, Language::kPython), "a", a, Language::kPython, 2},
                                    {pool_key(b, Language::kJavaScript), "b", b, Language::kJavaScript, 1}};
  uint64_t budget = 0;
  auto back = pool_entries_from_json(to_json(entries, 123), budget);
  EXPECT_EQ(budget, 123u);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].key, entries[1].key);
  EXPECT_EQ(back[1].profile_yaml, b);
  EXPECT_EQ(back[1].language, Language::kJavaScript);
  EXPECT_EQ(back[0].size, 2u);
  nlohmann::ordered_json bad = to_json(entries, 1);
  bad["entries"][0]["language"] = "cobol";
  EXPECT_THROW(pool_entries_from_json(bad, budget), UsageError);
}

TEST(PoolConfig, EachLanguageHasAForkServerWhereTheProfileNamesIt) {
  const std::string a = "name: a\nfork_server: [javascript]\n";
  PoolEntry python{pool_key(a, Language::kPython), "a", a, Language::kPython, 2, false};
  PoolEntry js{pool_key(a, Language::kJavaScript), "a", a, Language::kJavaScript, 2, true};
  uint64_t budget = 0;
  auto back = pool_entries_from_json(to_json({python, js}, 0), budget);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_FALSE(back[0].fork_server);
  EXPECT_TRUE(back[1].fork_server);
  EXPECT_EQ(back[1].language, Language::kJavaScript);
}

TEST(ParsedProfiles, EachPoolProfileIsParsedOnceAndOnlyWhileItIsConfigured) {
  const std::string a = "name: a\nfork_server: true\n", b = "name: b\n";
  const std::string broken = "name: c\nno_such_key: 1\n";
  ParsedProfiles profiles;
  profiles.keep({{pool_key(a, Language::kPython), "a", a, Language::kPython, 2, true},
                 {pool_key(a, Language::kJavaScript), "a", a, Language::kJavaScript, 1},
                 {pool_key(broken, Language::kPython), "c", broken, Language::kPython, 1}});
  EXPECT_EQ(profiles.size(), 1u) << "one profile for both languages; the broken one is not kept";
  const std::shared_ptr<const Profile> parsed = profiles.find("a", a);
  ASSERT_NE(parsed, nullptr);
  EXPECT_EQ(parsed->name, "a");
  EXPECT_TRUE(parsed->fork_server.python);
  EXPECT_EQ(profiles.get("a", a), parsed) << "served from what was parsed, not parsed again";
  EXPECT_EQ(profiles.find("b", b), nullptr);
  EXPECT_EQ(profiles.get("b", b)->name, "b") << "not configured: parsed on demand";
  EXPECT_THROW(profiles.get("c", broken), ProfileError) << "the error still reaches whoever needs the profile";

  profiles.keep({{pool_key(a, Language::kPython), "a", a, Language::kPython, 2, true},
                 {pool_key(b, Language::kPython), "b", b, Language::kPython, 1}});
  EXPECT_EQ(profiles.find("a", a), parsed) << "a profile still configured is kept as it was";
  ASSERT_NE(profiles.find("b", b), nullptr);
  profiles.keep({{pool_key(b, Language::kPython), "b", b, Language::kPython, 1}});
  EXPECT_EQ(profiles.find("a", a), nullptr) << "a profile no longer configured is dropped";
  EXPECT_EQ(profiles.size(), 1u);
}

}  // namespace
}  // namespace nsbox
