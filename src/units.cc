#include "nsbox/units.h"

#include <array>
#include <limits>
#include <stdexcept>
#include <string_view>

namespace nsbox {
namespace {

using u128 = unsigned __int128;

struct Unit {
  std::string_view name;
  uint64_t factor;
};

constexpr std::array<Unit, 5> kSizeUnits{
    {{"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}}};

// SI and shorthand spellings people write, each with the binary unit to use.
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kAmbiguousSizeUnits{{{"K", "KiB"},
                                                                                             {"k", "KiB"},
                                                                                             {"KB", "KiB"},
                                                                                             {"kB", "KiB"},
                                                                                             {"kb", "KiB"},
                                                                                             {"M", "MiB"},
                                                                                             {"MB", "MiB"},
                                                                                             {"mb", "MiB"},
                                                                                             {"G", "GiB"},
                                                                                             {"GB", "GiB"},
                                                                                             {"gb", "GiB"},
                                                                                             {"TB", "TiB"}}};

constexpr std::array<Unit, 4> kDurationUnits{{{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}}};

constexpr size_t kMaxIntegerDigits = 20;
constexpr size_t kMaxFractionDigits = 18;

// A non-negative decimal "123" or "1.25" split into its parts, and the rest
// of the text (the unit).
struct Decimal {
  u128 integer = 0;
  u128 fraction = 0;
  u128 fraction_scale = 1;  // 10^(number of fraction digits)
  bool too_long = false;    // more integer digits than any limit has
  bool too_fine = false;    // a non-zero digit past the fraction digits kept
  std::string_view unit;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Returns false when the text does not start with digits (or has a '.' not
// followed by a digit).
bool split_decimal(std::string_view text, Decimal& out) {
  size_t i = 0;
  size_t significant = 0;  // leading zeros do not make a number large
  while (i < text.size() && is_digit(text[i])) {
    if (significant > 0 || text[i] != '0') ++significant;
    if (significant > kMaxIntegerDigits) out.too_long = true;
    if (!out.too_long) out.integer = out.integer * 10 + static_cast<unsigned>(text[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  if (i < text.size() && text[i] == '.') {
    size_t start = ++i;
    while (i < text.size() && is_digit(text[i])) {
      if (i - start >= kMaxFractionDigits) {
        if (text[i] != '0') out.too_fine = true;
      } else {
        out.fraction = out.fraction * 10 + static_cast<unsigned>(text[i] - '0');
        out.fraction_scale *= 10;
      }
      ++i;
    }
    if (i == start) return false;
  }
  out.unit = text.substr(i);
  return true;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// integer * factor + fraction * factor / scale, or throws when the fraction
// does not land on a whole unit or the result exceeds max.
u128 scale_decimal(const Decimal& d, uint64_t factor, u128 max, const std::string& what, const std::string& text,
                   const char* whole_unit) {
  if (d.too_long) throw std::invalid_argument(what + " " + quoted(text) + " is too large");
  u128 frac = d.fraction * factor;
  if (d.too_fine)
    throw std::invalid_argument(what + " " + quoted(text) + " has more than " + std::to_string(kMaxFractionDigits) +
                                " digits after the point");
  if (frac % d.fraction_scale != 0) {
    throw std::invalid_argument(what + " " + quoted(text) + " is not a whole number of " + whole_unit);
  }
  u128 value = d.integer * factor + frac / d.fraction_scale;
  if (value > max) throw std::invalid_argument(what + " " + quoted(text) + " is too large");
  return value;
}

const Unit* find_unit(std::string_view name, const auto& units) {
  for (const auto& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

constexpr char kSizeExpected[] = "expected a size with a unit (B, KiB, MiB, GiB, TiB), got ";
constexpr char kDurationExpected[] = "expected a duration with a unit (ms, s, m, h), got ";

}  // namespace

uint64_t parse_size(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    throw std::invalid_argument("a size cannot be negative, got " + quoted(text));
  }
  Decimal d;
  if (!split_decimal(text, d) || d.unit.empty()) {
    throw std::invalid_argument(kSizeExpected + quoted(text));
  }
  if (d.unit[0] == ' ') {
    throw std::invalid_argument("unexpected space in " + quoted(text) + ": write the unit right after the number");
  }
  const Unit* unit = find_unit(d.unit, kSizeUnits);
  if (!unit) {
    for (const auto& [si, binary] : kAmbiguousSizeUnits) {
      if (si == d.unit) {
        throw std::invalid_argument("ambiguous size unit " + quoted(d.unit) + " in " + quoted(text) + ": use " +
                                    std::string(binary) + " (sizes are binary: B, KiB, MiB, GiB, TiB)");
      }
    }
    throw std::invalid_argument("unknown size unit " + quoted(d.unit) + " in " + quoted(text) +
                                ": expected B, KiB, MiB, GiB or TiB");
  }
  return static_cast<uint64_t>(
      scale_decimal(d, unit->factor, std::numeric_limits<uint64_t>::max(), "size", text, "bytes"));
}

std::chrono::milliseconds parse_duration(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    throw std::invalid_argument("a duration cannot be negative, got " + quoted(text));
  }
  Decimal d;
  if (!split_decimal(text, d) || d.unit.empty()) {
    throw std::invalid_argument(kDurationExpected + quoted(text));
  }
  if (d.unit[0] == ' ') {
    throw std::invalid_argument("unexpected space in " + quoted(text) + ": write the unit right after the number");
  }
  const Unit* unit = find_unit(d.unit, kDurationUnits);
  if (!unit) {
    throw std::invalid_argument("unknown duration unit " + quoted(d.unit) + " in " + quoted(text) +
                                ": expected ms, s, m or h");
  }
  constexpr auto kMax = static_cast<u128>(std::numeric_limits<std::chrono::milliseconds::rep>::max());
  auto ms = scale_decimal(d, unit->factor, kMax, "duration", text, "milliseconds");
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(ms));
}

std::string format_size(uint64_t bytes) {
  for (size_t i = kSizeUnits.size() - 1; i > 0; --i) {
    if (bytes != 0 && bytes % kSizeUnits[i].factor == 0) {
      return std::to_string(bytes / kSizeUnits[i].factor) + std::string(kSizeUnits[i].name);
    }
  }
  return std::to_string(bytes) + "B";
}

std::string format_duration(std::chrono::milliseconds duration) {
  auto ms = static_cast<uint64_t>(duration.count() < 0 ? 0 : duration.count());
  if (ms == 0) return "0s";
  for (size_t i = kDurationUnits.size() - 1; i > 0; --i) {
    if (ms % kDurationUnits[i].factor == 0) {
      return std::to_string(ms / kDurationUnits[i].factor) + std::string(kDurationUnits[i].name);
    }
  }
  return std::to_string(ms) + "ms";
}

}  // namespace nsbox
