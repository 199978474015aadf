// libFuzzer target: sizes and durations as profiles and configs write them.
// A refusal is std::invalid_argument; an accepted value must print back to
// text that parses to the same value.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "nsbox/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    uint64_t bytes = nsbox::parse_size(text);
    if (nsbox::parse_size(nsbox::format_size(bytes)) != bytes) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  try {
    auto d = nsbox::parse_duration(text);
    if (d.count() < 0 || nsbox::parse_duration(nsbox::format_duration(d)) != d) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
