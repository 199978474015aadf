#include "nsbox/api.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nsbox/profile.h"

namespace nsbox {
namespace {

using json = nlohmann::ordered_json;

// A day: longer than any profile allows, short enough to be a real number.
constexpr double kMaxTimeoutSeconds = 86400;

// nlohmann's messages start with "[json.exception.parse_error.101] ".
// nlohmann's message without its "[json.exception...] " and without what it
// "last read": a request's bytes, which may be personal data, never go into
// the answer's error, which the audit log keeps. The position stays.
std::string parse_error_message(const std::string& what) {
  const size_t end = what.find("] ");
  std::string message = end == std::string::npos ? what : what.substr(end + 2);
  if (message.rfind("number overflow parsing '", 0) == 0) return "number overflow";
  const size_t read = message.find("; last read: '");
  if (read == std::string::npos) return message;
  const size_t expected = message.rfind("'; expected ");
  return message.substr(0, read) +
         (expected != std::string::npos && expected > read ? message.substr(expected + 1) : "");
}

void dump_into(const json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      dump_into(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      dump_into(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

namespace {

// Calls on(c) for each character of text outside its strings, until on
// returns false.
template <typename On>
void for_each_structural(std::string_view text, On on) {
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (!on(c)) {
      return;
    }
  }
}

}  // namespace

size_t json_nesting_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  for_each_structural(text, [&](char c) {
    if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    return deepest <= limit;
  });
  return std::min(deepest, limit + 1);
}

size_t json_value_count(std::string_view text, size_t limit) {
  size_t values = 1;
  for_each_structural(text, [&](char c) {
    if (c == ',' || c == '[' || c == '{') ++values;
    return values <= limit;
  });
  return std::min(values, limit + 1);
}

std::optional<std::string> json_integer_beyond_64_bits(std::string_view text) {
  std::string token;  // the number being read, outside strings
  std::optional<std::string> found;
  auto beyond = [](const std::string& t) {
    if (t.empty() || t.find_first_of(".eE") != std::string::npos) return false;  // not an integer
    const bool negative = t[0] == '-';
    const std::string_view digits = std::string_view(t).substr(negative ? 1 : 0);
    const std::string_view most = negative ? "9223372036854775808" : "18446744073709551615";
    return digits.size() > most.size() || (digits.size() == most.size() && digits > most);
  };
  auto end_token = [&] {
    if (beyond(token)) found = token.size() > 40 ? token.substr(0, 40) + "..." : token;
    token.clear();
    return !found;
  };
  for_each_structural(text, [&](char c) {
    const bool digit = c >= '0' && c <= '9';
    if (digit || c == '-' || (!token.empty() && (c == '.' || c == 'e' || c == 'E' || c == '+'))) {
      token += c;
      return true;
    }
    return end_token();
  });
  if (!found) end_token();
  return found;
}

namespace {

// The code unit of the \uXXXX escape at text[i] (text[i] is the backslash),
// or -1 when there is none there.
int escaped_code_unit(std::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  int unit = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const char c = text[k];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

bool is_high_surrogate(int unit) { return unit >= 0xD800 && unit <= 0xDBFF; }
bool is_low_surrogate(int unit) { return unit >= 0xDC00 && unit <= 0xDFFF; }

}  // namespace

std::string replace_lone_surrogate_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string || c != '\\') {
      if (c == '"') in_string = !in_string;
      out += c;
      continue;
    }
    const int unit = escaped_code_unit(text, i);
    if (is_high_surrogate(unit) && is_low_surrogate(escaped_code_unit(text, i + 6))) {
      out.append(text.substr(i, 12));  // a pair: one character
      i += 11;
    } else if (is_high_surrogate(unit) || is_low_surrogate(unit)) {
      out += "\\ufffd";
      i += 5;
    } else {
      out.append(text.substr(i, 2));  // any other escape, \" and \\ included
      i += 1;
    }
  }
  return out;
}

ParsedJson parse_untrusted_json(std::string_view text) {
  ParsedJson parsed;
  if (json_nesting_depth(text) > kMaxJsonDepth) {
    parsed.error = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  } else if (json_value_count(text) > kMaxJsonValues) {
    parsed.error =
        "too large: more than " + std::to_string(kMaxJsonValues) + " values (array elements and object members)";
  } else if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    parsed.error = "not valid JSON: a NUL byte at offset " + std::to_string(nul);
  } else if (const auto integer = json_integer_beyond_64_bits(text)) {
    parsed.error = "out of range: the integer " + *integer + " " + kBeyond64Bits + "; send it as a string";
  } else {
    // A key twice in one object: nlohmann keeps the last, a gateway in
    // front may check the first. Refused rather than read either way.
    std::vector<std::set<std::string>> keys;  // of each object open
    std::optional<std::string> twice;         // how the first key seen twice is named
    auto note_keys = [&](int, json::parse_event_t event, json& parsed_value) {
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == json::parse_event_t::key && !keys.empty() && !twice &&
          !keys.back().insert(parsed_value.get<std::string>()).second)
        // Named only at the top (a request's own keys): deeper keys are the
        // caller's data, and the error goes to the audit log.
        twice = keys.size() == 1 ? "the key " + json(parsed_value.get<std::string>().substr(0, 100))
                                                    .dump(-1, ' ', false, json::error_handler_t::replace)
                                 : std::string("a key of a nested object");
      return true;
    };
    try {
      try {
        parsed.value = json::parse(text.begin(), text.end(), note_keys);
      } catch (const nlohmann::json::parse_error& e) {
        // A lone UTF-16 surrogate (\ud800) has no UTF-8 form; Python's and
        // JavaScript's parsers take it, so it arrives as U+FFFD instead.
        const std::string mended = replace_lone_surrogate_escapes(text);
        if (std::string_view(e.what()).find("surrogate") == std::string_view::npos || mended == text) throw;
        keys.clear();
        parsed.value = json::parse(mended, note_keys);
      }
      if (twice) {
        parsed.value = nullptr;
        parsed.error = "ambiguous: " + *twice + " appears twice in one object";
      }
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
      parsed.error = "not valid JSON: " + parse_error_message(e.what());
    }
  }
  return parsed;
}

DecodedRequest decode_run_request(std::string_view body, std::optional<Language> pinned, bool refuse_unknown_keys) {
  DecodedRequest d;
  ParsedJson parsed = parse_untrusted_json(body);
  if (!parsed.error.empty()) {
    d.error = "request body is " + parsed.error;
    return d;
  }
  const json& j = parsed.value;
  if (!j.is_object()) {
    d.error = "request body must be a JSON object with \"code\"";
    return d;
  }
  if (refuse_unknown_keys) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key != "code" && key != "inputs" && key != "timeout" && key != "language") {
        d.error = "unknown key \"" + key.substr(0, 100) + "\": a run request has code, inputs, timeout and language";
        return d;
      }
    }
  }
  RunRequest r;
  r.exec.language = pinned.value_or(Language::kPython);
  if (j.contains("language") && !j["language"].is_null()) {
    if (!j["language"].is_string()) {
      d.error = "\"language\" must be a string";
      return d;
    }
    const std::string name = j["language"].get<std::string>();
    auto lang = parse_language(name);
    if (!lang || (pinned && *lang != *pinned)) {
      d.error = "Unsupported language: " + name;
      d.unsupported_language = true;
      return d;
    }
    r.exec.language = *lang;
  }
  if (j.contains("code") && !j["code"].is_null()) {
    if (!j["code"].is_string()) {
      d.error = "\"code\" must be a string";
      return d;
    }
    r.exec.code = j["code"].get<std::string>();
  }
  if (j.contains("inputs") && !j["inputs"].is_null()) {
    if (!j["inputs"].is_object()) {
      d.error = "\"inputs\" must be a JSON object";
      return d;
    }
    r.exec.inputs = std::move(j["inputs"]);
  }
  if (j.contains("timeout") && !j["timeout"].is_null()) {
    const json& t = j["timeout"];
    if (!t.is_number()) {
      d.error = "\"timeout\" must be a number of seconds";
      return d;
    }
    double seconds = t.get<double>();
    // Below nsbox's lowest limit a wall-clock limit does not hold (the
    // CLI's --timeout and profiles are held to it too).
    if (!std::isfinite(seconds) || seconds * 1000 < static_cast<double>(kMinLimitTime.count()) ||
        seconds > kMaxTimeoutSeconds) {
      d.error = "\"timeout\" must be at least 0.01 and at most 86400 seconds";
      return d;
    }
    r.timeout = std::chrono::milliseconds(std::llround(seconds * 1000));
  }
  d.request = std::move(r);
  return d;
}

std::string dump_platform_json(const json& value) {
  std::string out;
  dump_into(value, out);
  return out;
}

std::string platform_answer(const json& return_value, const json& error) {
  // Insertion order matters here ("return" first): build the text directly.
  std::string out = "{\"return\": ";
  dump_into(return_value, out);
  out += ", \"error\": ";
  dump_into(error, out);
  out += '}';
  return out;
}

std::string unsupported_language_answer(const std::string& message) {
  return "{\"output\": " + platform_answer(nullptr, message) + "}";
}

}  // namespace nsbox
