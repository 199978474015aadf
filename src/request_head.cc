#include "nsbox/request_head.h"

#include <cstddef>

namespace nsbox {
namespace {

// RFC 9110's tchar: what a method and a header's name are made of.
bool is_token_char(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_token_char(c)) return false;
  return true;
}

// A value's bytes: visible ones, blanks and obs-text; no control byte but HTAB.
bool is_field_value(std::string_view s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  return true;
}

// The request target: a path (origin-form) or * (for OPTIONS), of visible
// bytes; curl sends UTF-8 in a URL as it was given, unencoded.
bool is_target(std::string_view s) {
  if (s != "*" && (s.empty() || s.front() != '/')) return false;
  for (unsigned char c : s)
    if (c <= 0x20 || c == 0x7f) return false;
  return true;
}

std::string_view trim_blanks(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string quoted(std::string_view s) {
  constexpr size_t kShown = 60;
  std::string out = "\"";
  for (unsigned char c : s.substr(0, kShown)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out + (s.size() > kShown ? "\"..." : "\"");
}

std::string parse_request_line(std::string_view line, RequestHead& out) {
  const size_t first = line.find(' ');
  const size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos)
    return "malformed request line " + quoted(line) + ": expected METHOD TARGET HTTP/1.1, one space apart";
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (!is_token(method)) return "malformed request line " + quoted(line) + ": the method is not a token";
  if (!is_target(target))
    return "malformed request line " + quoted(line) +
           ": the target is neither a path starting with / nor *, or holds a blank or a control byte";
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return "malformed request line " + quoted(line) + ": the version is neither HTTP/1.1 nor HTTP/1.0";
  out.method = method;
  out.target = target;
  out.version = version;
  return {};
}

// A header line is named by its number and, when it has a well-formed name,
// that name; never by its value, which may be a credential (the answer's
// error goes to the audit log).
std::string header_line_named(std::string_view line, size_t number) {
  std::string out = "header line " + std::to_string(number);
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos && is_token(line.substr(0, colon)))
    out += " (" + quoted(line.substr(0, colon)) + ")";
  return out;
}

std::string parse_header_line(std::string_view line, size_t number, RequestHead& out) {
  if (line.size() + 2 > kMaxHeaderLine)
    return header_line_named(line, number) + " is longer than " + std::to_string(kMaxHeaderLine) + " bytes";
  if (line.front() == ' ' || line.front() == '\t')
    return "malformed " + header_line_named(line, number) + ": a line folded onto the one before is not accepted";
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return "malformed " + header_line_named(line, number) + ": it has no colon";
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name))
    return "malformed " + header_line_named(line, number) +
           ": the name before the colon is empty or holds a blank or a byte a name may not hold";
  const std::string_view value = line.substr(colon + 1);
  if (!is_field_value(value))
    return "malformed " + header_line_named(line, number) + ": its value holds a control byte";
  out.headers.emplace_back(name, trim_blanks(value));
  return {};
}

}  // namespace

std::string parse_request_head(std::string_view head, RequestHead& out) {
  out = RequestHead{};
  bool request_line = true;
  size_t number = 1;  // of the header line next, counted from the first after the request line
  for (size_t at = 0; at < head.size();) {
    const size_t lf = head.find('\n', at);
    if (lf == std::string_view::npos) return "the request head does not end in an empty line";
    if (lf == at || head[lf - 1] != '\r')
      return "malformed request head: a line ends in a bare LF; every line must end in CRLF";
    const std::string_view line = head.substr(at, lf - 1 - at);
    at = lf + 1;
    if (line.find('\r') != std::string_view::npos)
      return "malformed request head: a bare CR inside " +
             (request_line ? "the request line " + quoted(line) : header_line_named(line, number));
    if (line.empty()) {
      if (request_line) return "malformed request head: it starts with an empty line";
      return at == head.size() ? std::string() : "the request head goes on past its empty line";
    }
    std::string error = request_line ? parse_request_line(line, out) : parse_header_line(line, number, out);
    if (!error.empty()) return error;
    if (!request_line) ++number;
    request_line = false;
  }
  return "the request head does not end in an empty line";
}

}  // namespace nsbox
