// libFuzzer target: the node's strict parser of request heads. A head it
// accepts must hold no byte that a lenient parser (cpp-httplib, a proxy)
// could split on or drop, and must print back to a head that parses to
// the same request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nsbox/request_head.h"

namespace {

bool holds_line_break_or_nul(const std::string& s) { return s.find_first_of(std::string("\r\n\0", 3)) != s.npos; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nsbox::RequestHead head;
  if (!nsbox::parse_request_head(text, head).empty()) return 0;
  std::string printed = head.method + " " + head.target + " " + head.version + "\r\n";
  for (const auto& [name, value] : head.headers) {
    if (name.empty() || name.find_first_of(" \t:") != std::string::npos || holds_line_break_or_nul(name) ||
        holds_line_break_or_nul(value))
      __builtin_trap();
    if (!value.empty() &&
        (value.front() == ' ' || value.front() == '\t' || value.back() == ' ' || value.back() == '\t'))
      __builtin_trap();
    printed += name + ": " + value + "\r\n";
  }
  printed += "\r\n";
  nsbox::RequestHead again;
  if (!nsbox::parse_request_head(printed, again).empty() || again.method != head.method ||
      again.target != head.target || again.version != head.version || again.headers != head.headers)
    __builtin_trap();
  return 0;
}
