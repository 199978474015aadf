// A chunked request body's framing lines, bounded.
//
// cpp-httplib 0.11 reads each framing line of a chunked body (a chunk's
// size with its extensions, the line end after its data, the line after the
// last chunk) whole into memory before it looks at it: a line that never
// ends grows the node's memory for as long as its client keeps sending.
// ChunkedFraming follows the bytes of one connection in the order
// cpp-httplib receives them and parses them as cpp-httplib does, so that
// the node can cut the connection once such a line passes kMaxFramingLine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nsbox {

// The longest framing line let through, its line end included.
constexpr size_t kMaxFramingLine = 4096;

class ChunkedFraming {
 public:
  // The connection's bytes as received, in order, from its request line on.
  // The head ends, as cpp-httplib reads it, at the first line that is only
  // CRLF; what follows is taken for a chunked body.
  void feed(const char* data, size_t size);

  // A framing line passed kMaxFramingLine: the body is to be refused.
  bool too_long() const { return state_ == State::kTooLong; }
  // Framing cpp-httplib reads leniently and a proxy in front may read
  // otherwise (a size as 0x1f, -5 or " 1f"; bytes other than CRLF after a
  // chunk's data; trailer fields): why the body is to be refused, or null.
  // The bytes are still followed as cpp-httplib reads them.
  const char* malformed() const { return malformed_; }
  // cpp-httplib has nothing more to read of this body (its end, or framing
  // it fails on itself).
  bool over() const { return state_ == State::kOver; }
  // Once over(): whether cpp-httplib takes the body as whole, and how many
  // bytes of chunk data it holds (checked against cpp-httplib itself).
  bool accepted() const { return accepted_; }
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  enum class State { kHead, kSizeLine, kData, kDataEnd, kLastLine, kOver, kTooLong };

  size_t take_head(const char* data, size_t size);
  size_t take_line(const char* data, size_t size);
  void line_ended();

  State state_ = State::kHead;
  int head_end_matched_ = 0;  // how much of "\n\r\n" the head's last bytes match
  uint64_t data_left_ = 0;
  uint64_t data_bytes_ = 0;
  bool accepted_ = false;
  const char* malformed_ = nullptr;
  std::string line_;
};

}  // namespace nsbox
