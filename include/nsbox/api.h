// The node's HTTP bodies: decoding a run request (the platform's `/run` and
// nsbox's `/v1/runs` share it) and encoding the answers in the platform's
// exact shape. Pure functions: no sockets, no sandboxes.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "nsbox/runtime.h"

namespace nsbox {

// How deep JSON may nest in a request or a result. Deeper documents are
// refused before parsing: printing them back would recurse once per level.
// Python's own json module stops at about 1000.
constexpr size_t kMaxJsonDepth = 1000;

// The deepest nesting of arrays and objects in text (strings skipped), or
// limit + 1 as soon as it is exceeded. Not a validator.
size_t json_nesting_depth(std::string_view text, size_t limit = kMaxJsonDepth);

// How many values (array elements, object members, the document) JSON may
// hold in a request or a result. Parsed, each costs nsbox 16 to 60 bytes, and
// a result is parsed twice (in the worker and the node): `[[]]*4000000`, 16 MB
// as text, held 650 MB in the worker and 470 MB in the node, outside any
// run's limits, before this bound.
constexpr size_t kMaxJsonValues = 1000000;

// An upper bound of the values in text: its commas and opening brackets
// outside strings, plus one; limit + 1 as soon as it is exceeded. Not a
// validator.
size_t json_value_count(std::string_view text, size_t limit = kMaxJsonValues);

// The first integer in JSON text (strings skipped) outside what nlohmann
// holds as an integer, -2^63 to 2^64-1, cut to 40 digits; nullopt when
// there is none. Parsed, such an integer would silently become a double
// (Python's json reads and writes it exactly). Not a validator.
std::optional<std::string> json_integer_beyond_64_bits(std::string_view text);
inline constexpr const char* kBeyond64Bits =
    "is beyond the 64 bits nsbox carries exactly (-2^63 to 2^64-1) and would become a float";

// text with every \uXXXX escape of a lone UTF-16 surrogate (one not in a
// high-low pair) replaced by \ufffd. The runners write such strings this
// way (Python "\udcff", JavaScript String.fromCharCode(0xd800)); a JSON
// parser that builds UTF-8 refuses them. Not a validator.
std::string replace_lone_surrogate_escapes(std::string_view text);

// A JSON document parsed from text nsbox does not trust (a request body,
// `exec --inputs`), or why not: error is "nested deeper than 1000 levels"
// (checked first: the parser recurses, and a deep enough document would
// overflow its stack), "too large: more than 1000000 values ..."
// (kMaxJsonValues) or "not valid JSON: <reason>" (a NUL byte, at which
// nlohmann would end its input and ignore what follows; a syntax error; a
// number too large for a double). Never throws a parse error.
struct ParsedJson {
  nlohmann::ordered_json value;
  std::string error;  // empty when value holds the document
};
ParsedJson parse_untrusted_json(std::string_view text);

struct RunRequest {
  ExecRequest exec;
  // The request's "timeout" (seconds in the body); the profile's wall time
  // applies when absent, and is never exceeded.
  std::optional<std::chrono::milliseconds> timeout;
};

struct DecodedRequest {
  std::optional<RunRequest> request;
  std::string error;  // why not, when request is empty
  bool unsupported_language = false;
};

// {"code", "inputs", "timeout", "language"}; language defaults to pinned, else
// python. A listener pinned to one language refuses the other, as the
// platform's single-language servers do. Other keys are ignored, as the
// platform does, unless refuse_unknown_keys (nsbox's own /v1/runs: a
// mistyped "timout" must not run under the profile's limit unnoticed).
DecodedRequest decode_run_request(std::string_view body, std::optional<Language> pinned,
                                  bool refuse_unknown_keys = false);

// JSON as Python's json.dumps writes it (", " and ": " separators), which is
// what the platform's servers answer with.
std::string dump_platform_json(const nlohmann::ordered_json& value);

// {"return": <value>, "error": null} / {"return": null, "error": "<message>"}
std::string platform_answer(const nlohmann::ordered_json& return_value, const nlohmann::ordered_json& error);

// {"output": {"return": null, "error": "Unsupported language: X"}}
std::string unsupported_language_answer(const std::string& message);

}  // namespace nsbox
