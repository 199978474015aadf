// What a worker sends the node on its job's socket (spawner.h): what the
// run's egress proxy does, as it does it, then the run's result. A worker
// that dies mid-run (killed, out of memory) sends no result, yet the node
// still has what its run's proxy did (the connections, counts, caps and
// the bytes of each relay that ended) for the audit log and the metrics.
//
// Frames: a tag, a 4-byte length (host order, both ends are this host) and
// JSON: 'd' a connection just decided (EgressConnection), 'x' a relay that
// ended ({"index", "bytes_sent", "bytes_received"}), 't' the run's counts
// as they stand (after each of the others, and alone for a change past
// the cap); then at most one 'r', followed by the result's JSON up to the
// end of the stream.
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

// The worker's end. journal_to(it) is given to the run's egress proxy, whose
// threads may call it until the proxy stops; result() and end() end the
// stream, so what the proxy does after (a run torn down after its answer)
// is dropped instead of written to an fd that may be closed and reused.
class JobStreamWriter {
 public:
  explicit JobStreamWriter(int job_fd) : fd_(job_fd) {}
  JobStreamWriter(const JobStreamWriter&) = delete;
  JobStreamWriter& operator=(const JobStreamWriter&) = delete;

  // Sends the result and ends the stream. False when the node is gone.
  bool result(std::string_view json_text);
  // Ends the stream without a result (idempotent): before the job's fd closes.
  void end();
  // Sends what entry says changed, and the counts, unless the stream has
  // ended. False when it was not sent.
  bool egress(const EgressJournalEntry& entry);

 private:
  int fd_;
  std::mutex mu_;
  bool ended_ = false;
};

// An EgressJournal that sends through writer.
EgressJournal journal_to(std::shared_ptr<JobStreamWriter> writer);

// The node's end: takes the stream as it arrives, in pieces of any size.
// What the proxy did is kept as it came and parsed only when asked for.
class JobStreamReader {
 public:
  // False once what came is not a job stream (an unknown frame, a frame too
  // large); the rest is then ignored.
  bool feed(std::string_view bytes);
  // Whether the result frame began; its text is complete at end of stream.
  bool has_result() const { return in_result_; }
  std::string take_result_text() { return std::move(result_); }
  // Whether the worker told of an egress proxy (its counts came).
  bool has_egress() const { return !tally_.empty(); }
  // The Result's `network` section from what came, for a run whose worker
  // sent no result (or one without it): counts and caps as the proxy had
  // them, the connections as decided, with the bytes of each relay that
  // ended. A relay still open when the worker died is null (unknown),
  // never 0, and so are the run's totals then. Null without has_egress().
  nlohmann::ordered_json network() const;
  // What the counts say of the Result's limits_hit (network_connections,
  // network_bytes).
  std::vector<std::string> limits_hit() const;
  // Gives a result (a Result's JSON object) that has no network section
  // (its worker died, or its sandbox failed after the proxy ran) the one
  // above, and adds its limits to limits_hit: the run's connections stay
  // on record. A result with a network section is left as it is.
  void fill_network(nlohmann::ordered_json& result) const;

 private:
  bool take_frame(char tag, std::string_view payload);

  std::string pending_;  // a frame's start, until it is whole
  std::string result_;
  std::vector<std::string> decided_;  // at most kMaxEgressConnections
  std::vector<std::string> relayed_;  // at most kMaxEgressConnections
  std::string tally_;                 // the last counts
  bool in_result_ = false;
  bool broken_ = false;
};

}  // namespace nsbox
