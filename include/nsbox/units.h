// Sizes and durations as profiles write them: always with a unit, so that
// "256" never silently means bytes or seconds. Binary size units only
// (KiB, MiB, ...): "MB" is refused rather than guessed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nsbox {

// "10B", "512KiB", "256MiB", "1GiB", "1TiB"; a decimal number is accepted when
// the result is a whole number of bytes ("1.5KiB" = 1536 bytes, "1.5B" is
// refused). Throws std::invalid_argument naming what was expected for a bare
// number, a negative value, an unknown or SI unit, overflow or an empty string.
uint64_t parse_size(const std::string& text);

// "500ms", "10s", "2m", "1h", "1.5s"; the result must be a whole number of
// milliseconds. Same refusals as parse_size.
std::chrono::milliseconds parse_duration(const std::string& text);

// The shortest exact spelling with the largest unit that divides the value:
// 256MiB, 1536KiB, 1000B, 0B. parse_size(format_size(n)) == n for every n.
std::string format_size(uint64_t bytes);

// The shortest exact spelling: 2m, 90s, 1500ms, 1h, 0s.
// parse_duration(format_duration(d)) == d for every d >= 0.
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace nsbox
