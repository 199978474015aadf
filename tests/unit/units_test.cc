#include "nsbox/units.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>

namespace nsbox {
namespace {

using std::chrono::milliseconds;

std::string size_error(const std::string& text) {
  try {
    parse_size(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

std::string duration_error(const std::string& text) {
  try {
    parse_duration(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseSize, BinaryUnits) {
  EXPECT_EQ(parse_size("10B"), 10u);
  EXPECT_EQ(parse_size("0B"), 0u);
  EXPECT_EQ(parse_size("512KiB"), 512u << 10);
  EXPECT_EQ(parse_size("256MiB"), 256u << 20);
  EXPECT_EQ(parse_size("1GiB"), 1ull << 30);
  EXPECT_EQ(parse_size("1TiB"), 1ull << 40);
  EXPECT_EQ(parse_size("1.5KiB"), 1536u);
  EXPECT_EQ(parse_size("0.5GiB"), 512ull << 20);
  EXPECT_EQ(parse_size("18446744073709551615B"), std::numeric_limits<uint64_t>::max());
}

TEST(ParseSize, RefusesWithWhatWasExpected) {
  EXPECT_EQ(size_error("256"), "expected a size with a unit (B, KiB, MiB, GiB, TiB), got \"256\"");
  EXPECT_EQ(size_error(""), "expected a size with a unit (B, KiB, MiB, GiB, TiB), got \"\"");
  EXPECT_EQ(size_error("MiB"), "expected a size with a unit (B, KiB, MiB, GiB, TiB), got \"MiB\"");
  EXPECT_EQ(size_error("1.MiB"), "expected a size with a unit (B, KiB, MiB, GiB, TiB), got \"1.MiB\"");
  EXPECT_EQ(size_error("-1MiB"), "a size cannot be negative, got \"-1MiB\"");
  EXPECT_EQ(size_error("256MB"),
            "ambiguous size unit \"MB\" in \"256MB\": use MiB (sizes are binary: B, KiB, MiB, GiB, TiB)");
  EXPECT_EQ(size_error("1G"), "ambiguous size unit \"G\" in \"1G\": use GiB (sizes are binary: B, KiB, MiB, GiB, TiB)");
  EXPECT_EQ(size_error("10XiB"), "unknown size unit \"XiB\" in \"10XiB\": expected B, KiB, MiB, GiB or TiB");
  EXPECT_EQ(size_error("10mib"), "unknown size unit \"mib\" in \"10mib\": expected B, KiB, MiB, GiB or TiB");
  EXPECT_EQ(size_error("256 MiB"), "unexpected space in \"256 MiB\": write the unit right after the number");
  EXPECT_EQ(size_error("1.5B"), "size \"1.5B\" is not a whole number of bytes");
  EXPECT_EQ(size_error("16777216TiB"), "size \"16777216TiB\" is too large");
  EXPECT_EQ(size_error("18446744073709551616B"), "size \"18446744073709551616B\" is too large");
  EXPECT_EQ(size_error("999999999999999999999999B"), "size \"999999999999999999999999B\" is too large");
  EXPECT_EQ(size_error("1.0000000000000000000001KiB"),
            "size \"1.0000000000000000000001KiB\" has more than 18 digits after the point");
}

TEST(ParseSize, LeadingAndTrailingZerosDoNotMakeANumberLarge) {
  EXPECT_EQ(parse_size("0000000000000000000000064MiB"), 64ull << 20);
  EXPECT_EQ(parse_size("1.00000000000000000000000GiB"), 1ull << 30);
  EXPECT_EQ(parse_duration("00000000000000000000000001.5000000000000000000000s"), milliseconds(1500));
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(parse_duration("500ms"), milliseconds(500));
  EXPECT_EQ(parse_duration("10s"), milliseconds(10000));
  EXPECT_EQ(parse_duration("2m"), milliseconds(120000));
  EXPECT_EQ(parse_duration("1h"), milliseconds(3600000));
  EXPECT_EQ(parse_duration("1.5s"), milliseconds(1500));
  EXPECT_EQ(parse_duration("0.25m"), milliseconds(15000));
  EXPECT_EQ(parse_duration("0s"), milliseconds(0));
}

TEST(ParseDuration, RefusesWithWhatWasExpected) {
  EXPECT_EQ(duration_error("10"), "expected a duration with a unit (ms, s, m, h), got \"10\"");
  EXPECT_EQ(duration_error(""), "expected a duration with a unit (ms, s, m, h), got \"\"");
  EXPECT_EQ(duration_error("-1s"), "a duration cannot be negative, got \"-1s\"");
  EXPECT_EQ(duration_error("10sec"), "unknown duration unit \"sec\" in \"10sec\": expected ms, s, m or h");
  EXPECT_EQ(duration_error("1d"), "unknown duration unit \"d\" in \"1d\": expected ms, s, m or h");
  EXPECT_EQ(duration_error("1.5ms"), "duration \"1.5ms\" is not a whole number of milliseconds");
  EXPECT_EQ(duration_error("9999999999999999999h"), "duration \"9999999999999999999h\" is too large");
  EXPECT_EQ(duration_error("10 s"), "unexpected space in \"10 s\": write the unit right after the number");
}

TEST(FormatSize, LargestExactUnit) {
  EXPECT_EQ(format_size(0), "0B");
  EXPECT_EQ(format_size(10), "10B");
  EXPECT_EQ(format_size(1000), "1000B");
  EXPECT_EQ(format_size(1024), "1KiB");
  EXPECT_EQ(format_size(1536), "1536B");
  EXPECT_EQ(format_size(1536ull << 10), "1536KiB");
  EXPECT_EQ(format_size(256ull << 20), "256MiB");
  EXPECT_EQ(format_size(1ull << 30), "1GiB");
  EXPECT_EQ(format_size(3ull << 40), "3TiB");
}

TEST(FormatDuration, LargestExactUnit) {
  EXPECT_EQ(format_duration(milliseconds(0)), "0s");
  EXPECT_EQ(format_duration(milliseconds(500)), "500ms");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(format_duration(milliseconds(10000)), "10s");
  EXPECT_EQ(format_duration(milliseconds(90000)), "90s");
  EXPECT_EQ(format_duration(milliseconds(120000)), "2m");
  EXPECT_EQ(format_duration(milliseconds(7200000)), "2h");
}

TEST(Units, FormatThenParseIsIdentity) {
  for (uint64_t n : std::initializer_list<uint64_t>{0, 1, 1023, 1024, 1025, 1536ull << 10, 5ull << 30, 7ull << 40,
                                                    std::numeric_limits<uint64_t>::max()}) {
    EXPECT_EQ(parse_size(format_size(n)), n) << n;
  }
  for (long long ms : {0LL, 1LL, 999LL, 1000LL, 59999LL, 60000LL, 3600000LL, 3600001LL}) {
    EXPECT_EQ(parse_duration(format_duration(milliseconds(ms))), milliseconds(ms)) << ms;
  }
}

}  // namespace
}  // namespace nsbox
