// What a worker sends the node on its job's socket (spawner.h): each egress
// decision of the run as the proxy makes it, then the run's result. A
// worker that dies mid-run (killed, out of memory) sends no result, yet the
// node still has the connections its run made, for the audit log and the
// metrics.
//
// Frames: 'e', a 4-byte length (host order, both ends are this host), one
// EgressConnection as JSON; at most one 'r', followed by the result's JSON
// up to the end of the stream.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nsbox/egress_report.h"

namespace nsbox {

// The worker's end. Its journal() is given to the run's egress proxy, whose
// threads may call it until the proxy stops; result() ends the stream, so a
// decision made after it (by a run torn down after its answer) is dropped
// instead of written to an fd that may be closed and reused by then.
class JobStreamWriter {
 public:
  explicit JobStreamWriter(int job_fd) : fd_(job_fd) {}
  JobStreamWriter(const JobStreamWriter&) = delete;
  JobStreamWriter& operator=(const JobStreamWriter&) = delete;

  // Sends the result; nothing is sent after it. False when the node is gone.
  bool result(std::string_view json_text);
  // Sends one decision, unless the result went already. False when it was
  // not sent.
  bool decision(const EgressConnection& connection);

 private:
  int fd_;
  std::mutex mu_;
  bool ended_ = false;
};

// An EgressJournal that sends each decision through writer.
EgressJournal journal_to(std::shared_ptr<JobStreamWriter> writer);

// The node's end: takes the stream as it arrives, in pieces of any size.
class JobStreamReader {
 public:
  // False once what came is not a job stream (an unknown frame, a decision
  // frame too large or not JSON); the rest is then ignored.
  bool feed(std::string_view bytes);
  // Whether the result frame began; its text is complete at end of stream.
  bool has_result() const { return in_result_; }
  std::string take_result_text() { return std::move(result_); }
  // The decisions sent, in order; at most kMaxEgressConnections are kept.
  const std::vector<nlohmann::ordered_json>& decisions() const { return decisions_; }

 private:
  bool take_decision(std::string_view payload);

  std::string pending_;  // a frame's start, until it is whole
  std::string result_;
  std::vector<nlohmann::ordered_json> decisions_;
  bool in_result_ = false;
  bool broken_ = false;
};

// The Result's `network` section from decisions alone, for a run whose
// worker died: the verdict counts and the connections as decided. What an
// allowed connection relayed was counted by the worker and died with it: its
// bytes, and the run's, are null (unknown), never 0.
nlohmann::ordered_json network_of_decisions(const std::vector<nlohmann::ordered_json>& decisions);

}  // namespace nsbox
