// What a worker sends the node on a job's socket: egress decisions as they
// are made, then the result; and what the node makes of a stream that ends
// without a result (the worker died).
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

EgressConnection decision(const std::string& host, EgressVerdict verdict, const std::string& reason) {
  return {"http-connect", host, 443, "192.0.2.7", verdict, reason, 0, 0, "2026-12-06T07:00:00.000Z"};
}

TEST(JobStream, DecisionsArriveAheadOfTheResultWhateverTheReadsSizes) {
  SocketPair pair;
  JobStreamWriter writer(pair.worker.get());
  ASSERT_TRUE(writer.decision(decision("api.example.com", EgressVerdict::kAllowed, "rule {host: api.example.com}")));
  ASSERT_TRUE(writer.decision(decision("evil.example.net", EgressVerdict::kDenied, "no rule allows it")));
  const std::string result = R"({"return":6,"error":null,"stdout":"e\u0000r"})";
  ASSERT_TRUE(writer.result(result));
  const std::string wire = pair.drain();
  for (size_t piece : {wire.size(), size_t{1}, size_t{3}, size_t{7}}) {
    JobStreamReader reader;
    for (size_t at = 0; at < wire.size(); at += piece)
      ASSERT_TRUE(reader.feed(std::string_view(wire).substr(at, piece))) << piece;
    ASSERT_TRUE(reader.has_result()) << piece;
    EXPECT_EQ(reader.take_result_text(), result) << piece;
    ASSERT_EQ(reader.decisions().size(), 2u) << piece;
    EXPECT_EQ(reader.decisions()[0]["host"], "api.example.com");
    EXPECT_EQ(reader.decisions()[0]["verdict"], "allowed");
    EXPECT_EQ(reader.decisions()[1]["reason"], "no rule allows it");
    EXPECT_EQ(reader.decisions()[1]["time"], "2026-12-06T07:00:00.000Z");
  }
}

TEST(JobStream, NothingIsSentAfterTheResult) {
  SocketPair pair;
  JobStreamWriter writer(pair.worker.get());
  ASSERT_TRUE(writer.result("{}"));
  EXPECT_FALSE(writer.decision(decision("late.example.com", EgressVerdict::kDenied, "x")))
      << "a decision after the answer must not be written to an fd that may be reused";
  EXPECT_FALSE(writer.result("{}"));
  EXPECT_EQ(pair.drain(), "r{}");
}

TEST(JobStream, AWorkerWhoseNodeIsGoneIsToldSoAndLives) {
  SocketPair pair;
  JobStreamWriter writer(pair.worker.get());
  pair.node.reset();
  EXPECT_FALSE(writer.decision(decision("api.example.com", EgressVerdict::kAllowed, "rule")))
      << "EPIPE, without SIGPIPE killing the worker";
  EXPECT_FALSE(writer.result("{}"));
}

TEST(JobStream, TheJournalSendsThroughTheWriter) {
  SocketPair pair;
  auto writer = std::make_shared<JobStreamWriter>(pair.worker.get());
  const EgressJournal journal = journal_to(writer);
  journal(decision("api.example.com", EgressVerdict::kFailed, "no address"));
  writer->result("{}");
  JobStreamReader reader;
  ASSERT_TRUE(reader.feed(pair.drain()));
  ASSERT_EQ(reader.decisions().size(), 1u);
  EXPECT_EQ(reader.decisions()[0]["verdict"], "failed");
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
    std::string frame = "e";
    frame.append(reinterpret_cast<const char*>(&huge), sizeof huge);
    EXPECT_FALSE(reader.feed(frame)) << "a length no decision has: not buffered up to it";
  }
  {
    JobStreamReader reader;
    const uint32_t size = 3;
    std::string frame = "e";
    frame.append(reinterpret_cast<const char*>(&size), sizeof size);
    EXPECT_FALSE(reader.feed(frame + "[1]")) << "a decision is an object";
  }
  {
    JobStreamReader reader;
    EXPECT_TRUE(reader.feed("e\x02")) << "a header not yet whole waits";
    EXPECT_FALSE(reader.has_result());
    EXPECT_TRUE(reader.decisions().empty());
  }
}

TEST(JobStream, TheNetworkOfADeadWorkersRunCountsVerdictsAndLeavesRelayedBytesUnknown) {
  const std::vector<json> decisions = {
      to_json(decision("api.example.com", EgressVerdict::kAllowed, "rule {host: api.example.com}")),
      to_json(decision("169.254.169.254", EgressVerdict::kDenied, "link-local 169.254.0.0/16 (cloud metadata)")),
      to_json(decision("nowhere.example", EgressVerdict::kFailed, "no address")),
  };
  const json network = network_of_decisions(decisions);
  EXPECT_EQ(network["allowed"], 1);
  EXPECT_EQ(network["denied"], 1);
  EXPECT_EQ(network["failed"], 1);
  EXPECT_TRUE(network["bytes_sent"].is_null()) << "the worker that counted them died";
  EXPECT_TRUE(network["bytes_received"].is_null());
  ASSERT_EQ(network["connections"].size(), 3u);
  EXPECT_TRUE(network["connections"][0]["bytes_sent"].is_null());
  EXPECT_EQ(network["connections"][1]["bytes_sent"], 0) << "a denied request relayed nothing";
  EXPECT_EQ(network["denials"], json({"169.254.169.254:443 denied: link-local 169.254.0.0/16 (cloud metadata)",
                                      "nowhere.example:443 failed: no address"}));

  const json refused_only = network_of_decisions({decisions[1]});
  EXPECT_EQ(refused_only["bytes_sent"], 0) << "nothing was allowed, so nothing was relayed";

  // The node's audit and metrics take such a section as it is.
  AuditContext ctx;
  ctx.run_id = "r9";
  ctx.tenant = "acme";
  const json died = {{"status", "error"}, {"error_type", "sandbox"}, {"network", network}};
  const json record = audit_record(ctx, died);
  EXPECT_EQ(record["network"]["allowed"], 1);
  EXPECT_TRUE(record["network"]["bytes_sent"].is_null());
  const auto lines = egress_audit_records(ctx, died);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["run_id"], "r9");
  EXPECT_TRUE(lines[0]["bytes_received"].is_null());
  EXPECT_EQ(lines[1]["verdict"], "denied");
  Metrics metrics;
  metrics.egress_finished("acme", network);
  const std::string text = metrics.render({});
  EXPECT_NE(text.find("nsbox_egress_connections_total{tenant=\"acme\",verdict=\"allowed\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nsbox_egress_bytes_total{tenant=\"acme\",direction=\"sent\"} 0\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace nsbox
