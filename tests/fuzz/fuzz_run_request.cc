// libFuzzer target: the HTTP request decoder (/run and /v1/runs bodies) and
// the platform-shaped answer printer. Every input must decode to a request
// or to an error message, never crash, recurse without bound or throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "nsbox/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto pinned : {std::optional<nsbox::Language>{}, std::optional<nsbox::Language>{nsbox::Language::kJavaScript}}) {
    nsbox::DecodedRequest d = nsbox::decode_run_request(body, pinned);
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
  return 0;
}
