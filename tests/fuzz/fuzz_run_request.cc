// libFuzzer target: the HTTP request decoder (/run and /v1/runs bodies), the
// platform-shaped answer printer and the lone-surrogate repair of results.
// Every input must decode to a request or to an error message, never crash,
// recurse without bound or throw; JSON that parses needs no repair.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "nsbox/api.h"

namespace {

void check_decoding(const nsbox::DecodedRequest& d) {
  if (d.request.has_value() == !d.error.empty()) __builtin_trap();  // exactly one of them
  if (d.request) {
    if (d.request->timeout && d.request->timeout->count() < 1) __builtin_trap();
    nsbox::platform_answer(d.request->exec.inputs, d.request->exec.code);
  } else if (d.unsupported_language) {
    nsbox::unsupported_language_answer(d.error);
  } else {
    nsbox::platform_answer(nullptr, d.error);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (nsbox::json_nesting_depth(body) <= nsbox::kMaxJsonDepth) {
    const std::string repaired = nsbox::replace_lone_surrogate_escapes(body);
    // JSON a parser reads has no lone surrogate: nothing to repair. (nlohmann
    // ends the input at a NUL byte, so what follows one is not JSON it read.)
    if (body.find('\0') == std::string_view::npos &&
        !nlohmann::json::parse(body.begin(), body.end(), nullptr, false).is_discarded() && repaired != body)
      __builtin_trap();
  }
  for (bool native : {false, true}) {
    for (auto pinned :
         {std::optional<nsbox::Language>{}, std::optional<nsbox::Language>{nsbox::Language::kJavaScript}}) {
      check_decoding(nsbox::decode_run_request(body, pinned, native));
    }
  }
  return 0;
}
