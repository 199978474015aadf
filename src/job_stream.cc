#include "nsbox/job_stream.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "nsbox/egress_policy.h"
#include "nsbox/result.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;

constexpr char kDecisionFrame = 'e';
constexpr char kResultFrame = 'r';
// A decision is a host name, an address and a reason: far below this.
constexpr uint32_t kMaxDecisionBytes = 64 * 1024;
constexpr size_t kDecisionHeader = 1 + sizeof(uint32_t);

// Sends all of data; false when the node is gone. MSG_NOSIGNAL: a node that
// went away must not kill the worker with SIGPIPE.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

bool JobStreamWriter::result(std::string_view json_text) {
  std::lock_guard lock(mu_);
  if (ended_) return false;
  ended_ = true;
  return send_all(fd_, std::string(1, kResultFrame)) && send_all(fd_, json_text);
}

bool JobStreamWriter::decision(const EgressConnection& connection) {
  const std::string payload = to_json(connection).dump(-1, ' ', false, json::error_handler_t::replace);
  if (payload.size() > kMaxDecisionBytes) return false;
  std::string frame(kDecisionHeader, kDecisionFrame);
  const auto size = static_cast<uint32_t>(payload.size());
  std::memcpy(frame.data() + 1, &size, sizeof size);
  frame += payload;
  std::lock_guard lock(mu_);
  return !ended_ && send_all(fd_, frame);
}

EgressJournal journal_to(std::shared_ptr<JobStreamWriter> writer) {
  return [writer = std::move(writer)](const EgressConnection& c) { writer->decision(c); };
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
    if (tag != kDecisionFrame) {
      broken_ = true;
      return false;
    }
    if (pending_.size() - at < kDecisionHeader) break;
    uint32_t size = 0;
    std::memcpy(&size, pending_.data() + at + 1, sizeof size);
    if (size > kMaxDecisionBytes) {
      broken_ = true;
      return false;
    }
    if (pending_.size() - at - kDecisionHeader < size) break;
    if (!take_decision(std::string_view(pending_).substr(at + kDecisionHeader, size))) {
      broken_ = true;
      return false;
    }
    at += kDecisionHeader + size;
  }
  pending_.erase(0, at);
  return true;
}

bool JobStreamReader::take_decision(std::string_view payload) {
  json decision = json::parse(payload, nullptr, false);
  if (decision.is_discarded() || !decision.is_object()) return false;
  if (decisions_.size() < kMaxEgressConnections) decisions_.push_back(std::move(decision));
  return true;
}

json network_of_decisions(const std::vector<json>& decisions) {
  json network;
  uint64_t counts[3] = {0, 0, 0};  // allowed, denied, failed
  json connections = json::array();
  json denials = json::array();
  for (const json& d : decisions) {
    json c = d;
    const std::string verdict = d.value("verdict", "");
    if (verdict == to_string(EgressVerdict::kAllowed)) {
      ++counts[0];
      c["bytes_sent"] = nullptr;  // counted by the worker, which died
      c["bytes_received"] = nullptr;
    } else {
      ++counts[verdict == to_string(EgressVerdict::kDenied) ? 1 : 2];
      denials.push_back(
          egress_denial(d.value("host", ""), d.value("port", uint16_t{0}), verdict, d.value("reason", "")));
    }
    connections.push_back(std::move(c));
  }
  network["allowed"] = counts[0];
  network["denied"] = counts[1];
  network["failed"] = counts[2];
  // Only what an allowed connection relayed is unknown.
  network["bytes_sent"] = counts[0] ? json(nullptr) : json(0);
  network["bytes_received"] = counts[0] ? json(nullptr) : json(0);
  network["connections"] = std::move(connections);
  network["denials"] = std::move(denials);
  return network;
}

}  // namespace nsbox
