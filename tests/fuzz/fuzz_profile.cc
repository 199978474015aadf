// libFuzzer target: the profile loader on arbitrary text. A ProfileError or
// std::invalid_argument is a correct refusal; anything else (another
// exception, a crash, a sanitizer report) is a bug. An accepted profile must
// print back to YAML that loads to the same profile.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nsbox/profile_loader.h"

// The printed profile without its comment lines (they name the source file
// and the inheritance) and trailing blank lines.
static std::string printed_body(const nsbox::Profile& p) {
  std::string out;
  std::string text = nsbox::to_yaml(p);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text[start] != '#') out.append(text, start, end - start + 1);
    start = end + 1;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nsbox::Profile p;
  try {
    p = nsbox::load_profile_text(text, "fuzz.yaml", nsbox::ProfileSearch{});
  } catch (const nsbox::ProfileError&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  nsbox::Profile again = nsbox::load_profile_text(nsbox::to_yaml(p), "printed.yaml", nsbox::ProfileSearch{});
  if (printed_body(again) != printed_body(p)) __builtin_trap();
  return 0;
}
