#include "nsbox/job_stream.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "nsbox/egress_policy.h"
#include "nsbox/error.h"
#include "nsbox/io.h"
#include "nsbox/result.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;

constexpr char kDecidedFrame = 'd';
constexpr char kRelayedFrame = 'x';
constexpr char kTallyFrame = 't';
constexpr char kResultFrame = 'r';
// A decision is a host name, an address and a reason: far below this.
constexpr uint32_t kMaxFrameBytes = 64 * 1024;
constexpr size_t kFrameHeader = 1 + sizeof(uint32_t);

// Sends all of data; false when the node is gone (never SIGPIPE: see
// write_full).
bool send_all(int fd, std::string_view data) {
  try {
    write_full(fd, data, "send job stream", "the node");
    return true;
  } catch (const SysError&) {
    return false;
  }
}

// Appends one frame to out; false when payload is too large for one.
bool append_frame(std::string& out, char tag, const json& payload) {
  const std::string text = payload.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxFrameBytes) return false;
  const auto size = static_cast<uint32_t>(text.size());
  out += tag;
  out.append(reinterpret_cast<const char*>(&size), sizeof size);
  out += text;
  return true;
}

json tally_of(const EgressReport& r) {
  json tally = egress_counts(r);
  tally["connection_cap_hit"] = r.connection_cap_hit;
  tally["byte_cap_hit"] = r.byte_cap_hit;
  return tally;
}

json parse_object(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json::object();
}

bool is_allowed(const json& connection) {
  return connection.value("verdict", "") == to_string(EgressVerdict::kAllowed);
}

}  // namespace

bool JobStreamWriter::result(std::string_view json_text) {
  std::lock_guard lock(mu_);
  if (ended_) return false;
  ended_ = true;
  return send_all(fd_, std::string(1, kResultFrame)) && send_all(fd_, json_text);
}

void JobStreamWriter::end() {
  std::lock_guard lock(mu_);
  ended_ = true;
}

bool JobStreamWriter::egress(const EgressJournalEntry& entry) {
  std::string frames;
  using What = EgressJournalEntry::What;
  if (entry.what != What::kCounted && entry.index < entry.report.connections.size()) {
    const EgressConnection& c = entry.report.connections[entry.index];
    json decided = to_json(c);
    decided["index"] = entry.index;  // where it stands in the report: its relay's end names it so
    const bool whole =
        entry.what == What::kDecided
            ? append_frame(frames, kDecidedFrame, decided)
            : append_frame(
                  frames, kRelayedFrame,
                  {{"index", entry.index}, {"bytes_sent", c.bytes_sent}, {"bytes_received", c.bytes_received}});
    if (!whole) return false;
  }
  append_frame(frames, kTallyFrame, tally_of(entry.report));
  std::lock_guard lock(mu_);
  return !ended_ && send_all(fd_, frames);
}

EgressJournal journal_to(std::shared_ptr<JobStreamWriter> writer) {
  return [writer = std::move(writer)](const EgressJournalEntry& entry) { writer->egress(entry); };
}

bool JobStreamReader::feed(std::string_view bytes) {
  if (broken_) return false;
  if (in_result_) {
    result_.append(bytes);
    return true;
  }
  pending_.append(bytes);
  size_t at = 0;
  while (at < pending_.size()) {
    const char tag = pending_[at];
    if (tag == kResultFrame) {
      in_result_ = true;
      result_.assign(pending_, at + 1);
      pending_.clear();
      return true;
    }
    if (pending_.size() - at < kFrameHeader) break;
    uint32_t size = 0;
    std::memcpy(&size, pending_.data() + at + 1, sizeof size);
    if (size > kMaxFrameBytes) {
      broken_ = true;
      return false;
    }
    if (pending_.size() - at - kFrameHeader < size) break;
    if (!take_frame(tag, std::string_view(pending_).substr(at + kFrameHeader, size))) {
      broken_ = true;
      return false;
    }
    at += kFrameHeader + size;
  }
  pending_.erase(0, at);
  return true;
}

bool JobStreamReader::take_frame(char tag, std::string_view payload) {
  switch (tag) {
    case kDecidedFrame:
      if (decided_.size() < kMaxEgressConnections) decided_.emplace_back(payload);
      return true;
    case kRelayedFrame:
      if (relayed_.size() < kMaxEgressConnections) relayed_.emplace_back(payload);
      return true;
    case kTallyFrame:
      tally_.assign(payload);
      return true;
    default:
      return false;
  }
}

json JobStreamReader::network() const {
  if (!has_egress()) return nullptr;
  // By their index in the proxy's report, which a relay's end names.
  std::map<size_t, json> by_index;
  for (const std::string& text : decided_) {
    json c = parse_object(text);
    const size_t index = c.value("index", by_index.size());
    c.erase("index");
    if (is_allowed(c)) {
      c["bytes_sent"] = nullptr;  // until its relay's end says
      c["bytes_received"] = nullptr;
    }
    by_index.emplace(index, std::move(c));
  }
  for (const std::string& text : relayed_) {
    const json r = parse_object(text);
    const auto it = by_index.find(r.value("index", std::numeric_limits<size_t>::max()));
    if (it == by_index.end()) continue;
    it->second["bytes_sent"] = r.value("bytes_sent", json(nullptr));
    it->second["bytes_received"] = r.value("bytes_received", json(nullptr));
  }
  json connections = json::array();
  for (auto& [index, c] : by_index) connections.push_back(std::move(c));
  bool relays_open = false;
  json denials = json::array();
  for (const json& c : connections) {
    if (is_allowed(c)) {
      relays_open = relays_open || c["bytes_sent"].is_null();
    } else {
      denials.push_back(egress_denial(c.value("host", ""), c.value("port", uint16_t{0}), c.value("verdict", ""),
                                      c.value("reason", "")));
    }
  }
  const json tally = parse_object(tally_);
  if (tally.value("connection_cap_hit", false)) denials.push_back(kConnectionCapDenial);
  json network;
  for (const char* count : {"allowed", "denied", "failed"}) network[count] = tally.value(count, json(nullptr));
  // The totals count only relays that ended: unknown while one was open.
  for (const char* bytes : {"bytes_sent", "bytes_received"})
    network[bytes] = relays_open ? json(nullptr) : tally.value(bytes, json(nullptr));
  network["connections"] = std::move(connections);
  network["denials"] = std::move(denials);
  return network;
}

std::vector<std::string> JobStreamReader::limits_hit() const {
  const json tally = parse_object(tally_);
  return egress_limits_hit(tally.value("connection_cap_hit", false), tally.value("byte_cap_hit", false));
}

void JobStreamReader::fill_network(json& result) const {
  if (!has_egress() || (result.contains("network") && !result["network"].is_null())) return;
  result["network"] = network();
  json& hit = result["limits_hit"];
  if (!hit.is_array()) hit = json::array();
  for (const auto& limit : limits_hit())
    if (std::find(hit.begin(), hit.end(), limit) == hit.end()) hit.push_back(limit);
}

}  // namespace nsbox
