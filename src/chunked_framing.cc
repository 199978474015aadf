#include "nsbox/chunked_framing.h"

#include <algorithm>
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

// What cpp-httplib's read_content_chunked does with a whole line, as a C
// string (an embedded NUL ends it there as well).
void ChunkedFraming::line_ended() {
  const char* line = line_.c_str();
  switch (state_) {
    case State::kSizeLine: {
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
      // Anything but CRLF ends the body there, taken as whole.
      if (std::strcmp(line, "\r\n") == 0) {
        state_ = State::kSizeLine;
      } else {
        accepted_ = true;
        state_ = State::kOver;
      }
      break;
    default:  // kLastLine: the body's last line, which must be CRLF
      accepted_ = std::strcmp(line, "\r\n") == 0;
      state_ = State::kOver;
      break;
  }
  line_.clear();
}

}  // namespace nsbox
