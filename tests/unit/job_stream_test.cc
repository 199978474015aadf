// What a worker sends the node on a job's socket: what the run's egress
// proxy does as it does it, then the result; and what the node makes of a
// stream that ends without a result (the worker died).
#include "nsbox/job_stream.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "nsbox/audit.h"
#include "nsbox/metrics.h"
#include "nsbox/result.h"
#include "nsbox/unique_fd.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;
using What = EgressJournalEntry::What;

struct SocketPair {
  UniqueFd worker, node;
  SocketPair() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair");
    worker.reset(sv[0]);
    node.reset(sv[1]);
  }
  // Everything the worker sent, once it has closed its end.
  std::string drain() {
    worker.reset();
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = ::read(node.get(), buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
    return all;
  }
};

EgressConnection connection(const std::string& host, EgressVerdict verdict, const std::string& reason) {
  return {"http-connect", host, 443, "192.0.2.7", verdict, reason, 0, 0, "2026-12-06T07:00:00.000Z"};
}

// A proxy's report as it grows, told to a journal the way the proxy tells it.
struct Proxy {
  EgressReport report;
  EgressJournal journal;
  void decide(EgressConnection c) {
    ++(c.verdict == EgressVerdict::kAllowed  ? report.allowed
       : c.verdict == EgressVerdict::kDenied ? report.denied
                                             : report.failed);
    report.connections.push_back(std::move(c));
    journal({report, What::kDecided, report.connections.size() - 1});
  }
  void relay_ended(size_t index, uint64_t sent, uint64_t received) {
    report.connections[index].bytes_sent = sent;
    report.connections[index].bytes_received = received;
    report.bytes_sent += sent;
    report.bytes_received += received;
    journal({report, What::kRelayed, index});
  }
  void refused_past_the_cap() {
    ++report.denied;
    report.connection_cap_hit = true;
    journal({report, What::kCounted});
  }
};

JobStreamReader read_all(const std::string& wire, size_t piece) {
  JobStreamReader reader;
  for (size_t at = 0; at < wire.size(); at += piece) EXPECT_TRUE(reader.feed(std::string_view(wire).substr(at, piece)));
  return reader;
}

TEST(JobStream, WhatTheProxyDidArrivesAheadOfTheResultWhateverTheReadsSizes) {
  SocketPair pair;
  auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
  Proxy proxy{{}, journal_to(writer)};
  proxy.decide(connection("api.example.com", EgressVerdict::kAllowed, "rule {host: api.example.com}"));
  proxy.decide(connection("evil.example.net", EgressVerdict::kDenied, "no rule allows it"));
  proxy.relay_ended(0, 120, 4000);
  const std::string result = R"({"return":6,"error":null,"stdout":"d\u0000r"})";
  ASSERT_TRUE(writer->result(result));
  const std::string wire = pair.drain();
  for (size_t piece : {wire.size(), size_t{1}, size_t{3}, size_t{7}}) {
    JobStreamReader reader = read_all(wire, piece);
    ASSERT_TRUE(reader.has_result()) << piece;
    EXPECT_EQ(reader.take_result_text(), result) << piece;
    ASSERT_TRUE(reader.has_egress());
    const json network = reader.network();
    ASSERT_EQ(network["connections"].size(), 2u) << piece;
    EXPECT_EQ(network["connections"][0]["host"], "api.example.com");
    EXPECT_EQ(network["connections"][0]["bytes_received"], 4000) << "its relay ended: known";
    EXPECT_EQ(network["connections"][1]["reason"], "no rule allows it");
    EXPECT_EQ(network["connections"][1]["time"], "2026-12-06T07:00:00.000Z");
    EXPECT_EQ(network["bytes_sent"], 120) << "every relay ended: the totals are known";
  }
}

TEST(JobStream, NothingIsSentAfterTheResultOrTheEnd) {
  for (bool with_result : {true, false}) {
    SocketPair pair;
    auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
    Proxy proxy{{}, journal_to(writer)};
    if (with_result) {
      ASSERT_TRUE(writer->result("{}"));
    } else {
      writer->end();
    }
    proxy.decide(connection("late.example.com", EgressVerdict::kDenied, "x"));
    EXPECT_FALSE(writer->result("{}"));
    EXPECT_EQ(pair.drain(), with_result ? "r{}" : "")
        << "a change after the answer must not be written to an fd that may be reused";
  }
}

TEST(JobStream, AWorkerWhoseNodeIsGoneIsToldSoAndLives) {
  SocketPair pair;
  JobStreamWriter writer(pair.worker.get());
  pair.node.reset();
  EgressReport report;
  EXPECT_FALSE(writer.egress({report, What::kCounted})) << "EPIPE, without SIGPIPE killing the worker";
  EXPECT_FALSE(writer.result("{}"));
}

TEST(JobStream, WhatIsNotAJobStreamIsRefused) {
  {
    JobStreamReader reader;
    EXPECT_FALSE(reader.feed("{\"return\": 1}")) << "an unframed result";
    EXPECT_FALSE(reader.has_result());
    EXPECT_FALSE(reader.feed("r{}")) << "nothing is read after a broken frame";
  }
  {
    JobStreamReader reader;
    const uint32_t huge = 1u << 30;
    std::string frame = "d";
    frame.append(reinterpret_cast<const char*>(&huge), sizeof huge);
    EXPECT_FALSE(reader.feed(frame)) << "a length no frame has: not buffered up to it";
  }
  {
    JobStreamReader reader;
    const uint32_t size = 2;
    std::string frame = "q";
    frame.append(reinterpret_cast<const char*>(&size), sizeof size);
    EXPECT_FALSE(reader.feed(frame + "{}")) << "an unknown frame";
  }
  {
    JobStreamReader reader;
    EXPECT_TRUE(reader.feed("t\x02")) << "a header not yet whole waits";
    EXPECT_FALSE(reader.has_result());
    EXPECT_FALSE(reader.has_egress());
    EXPECT_TRUE(reader.network().is_null());
  }
}

// A worker killed mid-run: counts (past the cap too) and caps as the proxy
// had them, each relay that ended with its bytes, the one still open null.
TEST(JobStream, TheNetworkOfADeadWorkersRunIsWhatItsProxyHadDone) {
  SocketPair pair;
  auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
  Proxy proxy{{}, journal_to(writer)};
  proxy.journal({proxy.report, What::kCounted});  // as set_journal tells it
  proxy.decide(connection("api.example.com", EgressVerdict::kAllowed, "rule {host: api.example.com}"));
  proxy.decide(connection("169.254.169.254", EgressVerdict::kDenied, "link-local 169.254.0.0/16 (cloud metadata)"));
  proxy.decide(connection("upload.example.com", EgressVerdict::kAllowed, "rule {host: upload.example.com}"));
  proxy.relay_ended(2, 200000, 300);
  proxy.decide(connection("nowhere.example", EgressVerdict::kFailed, "no address"));
  for (int i = 0; i < 6; ++i) proxy.refused_past_the_cap();
  JobStreamReader reader = read_all(pair.drain(), 5);
  ASSERT_FALSE(reader.has_result());
  const json network = reader.network();
  EXPECT_EQ(network["allowed"], 2);
  EXPECT_EQ(network["denied"], 7) << "past the cap too";
  EXPECT_EQ(network["failed"], 1);
  EXPECT_TRUE(network["bytes_sent"].is_null()) << "a relay was open when the worker died";
  ASSERT_EQ(network["connections"].size(), 4u);
  EXPECT_TRUE(network["connections"][0]["bytes_sent"].is_null()) << "still open: unknown, never 0";
  EXPECT_EQ(network["connections"][1]["bytes_sent"], 0) << "a denied request relayed nothing";
  EXPECT_EQ(network["connections"][2]["bytes_sent"], 200000) << "an upload that ended is on record";
  EXPECT_EQ(network["denials"], json({"169.254.169.254:443 denied: link-local 169.254.0.0/16 (cloud metadata)",
                                      "nowhere.example:443 failed: no address", kConnectionCapDenial}));
  EXPECT_EQ(reader.limits_hit(), std::vector<std::string>{"network_connections"});

  // The node's audit and metrics take such a section as it is.
  AuditContext ctx;
  ctx.run_id = "r9";
  ctx.tenant = "acme";
  const json died = {{"status", "error"}, {"error_type", "sandbox"}, {"network", network}};
  const json record = audit_record(ctx, died);
  EXPECT_EQ(record["network"]["denied"], 7);
  EXPECT_TRUE(record["network"]["bytes_sent"].is_null());
  const auto lines = egress_audit_records(ctx, died);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["run_id"], "r9");
  EXPECT_TRUE(lines[0]["bytes_received"].is_null());
  EXPECT_EQ(lines[2]["bytes_sent"], 200000);
  Metrics metrics;
  metrics.egress_finished("acme", network);
  const std::string text = metrics.render({});
  EXPECT_NE(text.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"denied\"} 7\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nsbox_egress_bytes_total{tenant=\"acme\",direction=\"sent\"} 200000\n"), std::string::npos)
      << "what the relays that ended carried is counted: " << text;
}

TEST(JobStream, AnEgressRunKilledBeforeItsFirstRequestShowsItHadEgress) {
  SocketPair pair;
  auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
  Proxy proxy{{}, journal_to(writer)};
  proxy.journal({proxy.report, What::kCounted});
  JobStreamReader reader = read_all(pair.drain(), 64);
  const json network = reader.network();
  EXPECT_EQ(network["allowed"], 0) << network;
  EXPECT_EQ(network["bytes_sent"], 0) << "no relay: nothing unknown";
  EXPECT_EQ(network["connections"], json::array());
  EXPECT_TRUE(reader.limits_hit().empty());
}

// A sandbox that failed after its proxy ran (its teardown) answers with an
// error result that has no network section: the stream's fills it in, and
// a result that has one keeps its own.
TEST(JobStream, AResultWithoutItsNetworkSectionTakesTheStreamsOne) {
  SocketPair pair;
  auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
  Proxy proxy{{}, journal_to(writer)};
  proxy.journal({proxy.report, What::kCounted});
  proxy.decide(connection("169.254.169.254", EgressVerdict::kDenied, "link-local 169.254.0.0/16 (cloud metadata)"));
  for (int i = 0; i < 2; ++i) proxy.refused_past_the_cap();
  JobStreamReader reader = read_all(pair.drain(), 7);

  json failed = {{"status", "error"}, {"error_type", "sandbox"}, {"limits_hit", {"network_connections", "memory"}}};
  reader.fill_network(failed);
  ASSERT_TRUE(failed["network"].is_object()) << failed;
  EXPECT_EQ(failed["network"]["denied"], 3);
  ASSERT_EQ(failed["network"]["connections"].size(), 1u);
  EXPECT_EQ(failed["network"]["connections"][0]["host"], "169.254.169.254");
  EXPECT_EQ(failed["limits_hit"], json({"network_connections", "memory"})) << "named once";

  json null_network = {{"status", "error"}, {"network", nullptr}};
  reader.fill_network(null_network);
  EXPECT_EQ(null_network["network"]["denied"], 3);
  EXPECT_EQ(null_network["limits_hit"], json({"network_connections"}));

  const json own = {{"allowed", 0}, {"denied", 1}};
  json answered = {{"status", "ok"}, {"network", own}, {"limits_hit", json::array()}};
  reader.fill_network(answered);
  EXPECT_EQ(answered["network"], own) << "the result's own section is the whole record";
  EXPECT_EQ(answered["limits_hit"], json::array());

  json no_egress = {{"status", "error"}};
  JobStreamReader().fill_network(no_egress);
  EXPECT_FALSE(no_egress.contains("network")) << "a run without egress gets no network section";
}

}  // namespace
}  // namespace nsbox
