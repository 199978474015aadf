#include "nsbox/chunked_framing.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace nsbox {

void ChunkedFraming::feed(const char* data, size_t size) {
  while (size > 0 && state_ != State::kOver && state_ != State::kTooLong) {
    size_t used = 0;
    switch (state_) {
      case State::kHead:
        used = take_head(data, size);
        break;
      case State::kData:
        used = static_cast<size_t>(std::min<uint64_t>(data_left_, size));
        data_left_ -= used;
        data_bytes_ += used;
        if (data_left_ == 0) state_ = State::kDataEnd;
        break;
      default:
        used = take_line(data, size);
        break;
    }
    data += used;
    size -= used;
  }
}

// cpp-httplib splits the head into lines at LF and ends it at the first
// line after the request line that is exactly CRLF: the first "\n\r\n".
size_t ChunkedFraming::take_head(const char* data, size_t size) {
  static constexpr char kEnd[] = "\n\r\n";
  for (size_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (c == kEnd[head_end_matched_]) {
      if (++head_end_matched_ == 3) {
        state_ = State::kSizeLine;
        return i + 1;
      }
    } else {
      head_end_matched_ = c == '\n' ? 1 : 0;
    }
  }
  return size;
}

size_t ChunkedFraming::take_line(const char* data, size_t size) {
  const auto* lf = static_cast<const char*>(std::memchr(data, '\n', size));
  const size_t used = lf ? static_cast<size_t>(lf - data) + 1 : size;
  if (line_.size() + used > kMaxFramingLine || (!lf && line_.size() + used == kMaxFramingLine)) {
    // Past the bound, or at it with its line end still to come.
    state_ = State::kTooLong;
    std::string().swap(line_);
    return size;
  }
  line_.append(data, used);
  if (lf) line_ended();
  return used;
}

namespace {

// RFC 9112's chunk-size line: 1 to 16 hex digits, then CRLF, or chunk
// extensions after a ';' (with blanks before it).
bool strict_size_line(const std::string& line) {
  size_t digits = 0;
  while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) ++digits;
  if (digits == 0 || digits > 16 || line.size() < digits + 2 || line.compare(line.size() - 2, 2, "\r\n") != 0)
    return false;
  const size_t after = line.find_first_not_of(" \t", digits);
  return line[digits] == '\r' ? line.size() == digits + 2 : line[after] == ';';
}

}  // namespace

// What cpp-httplib's read_content_chunked does with a whole line, as a C
// string (an embedded NUL ends it there as well); framing it reads
// leniently is noted as malformed, and still followed as it reads it.
void ChunkedFraming::line_ended() {
  const char* line = line_.c_str();
  switch (state_) {
    case State::kSizeLine: {
      if (!strict_size_line(line_) && !malformed_)
        malformed_ =
            "malformed chunked body: a chunk size line must be 1 to 16 hex digits (no sign, prefix or blank before "
            "them) and end in CRLF";
      char* end = nullptr;
      const unsigned long size = std::strtoul(line, &end, 16);
      if (end == line || size == ULONG_MAX) {
        state_ = State::kOver;  // cpp-httplib refuses the body
      } else if (size == 0) {
        state_ = State::kLastLine;
      } else {
        data_left_ = size;
        state_ = State::kData;
      }
      break;
    }
    case State::kDataEnd:
      // cpp-httplib takes anything but CRLF for the end of a whole body.
      if (std::strcmp(line, "\r\n") == 0) {
        state_ = State::kSizeLine;
      } else {
        if (!malformed_) malformed_ = "malformed chunked body: a chunk's data must be followed by CRLF";
        accepted_ = true;
        state_ = State::kOver;
      }
      break;
    default:  // kLastLine: the body's last line, which must be CRLF
      accepted_ = line_ == "\r\n";
      state_ = State::kOver;
      if (!accepted_ && !malformed_)
        malformed_ = "malformed chunked body: trailer fields are not accepted; the last chunk must be followed by CRLF";
      break;
  }
  line_.clear();
}

}  // namespace nsbox
