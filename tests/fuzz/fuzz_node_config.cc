// libFuzzer target: the node config loader on arbitrary text. Profiles are
// looked up nowhere (only the built-in default resolves); token files are
// read relative to a directory that does not exist.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nsbox/node_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    nsbox::NodeConfig c = nsbox::load_node_config_text(text, "/nonexistent/node.yaml", nsbox::ProfileSearch{});
    for (const auto& l : c.listeners) {
      if (l.port < 1 || l.port > 65535) __builtin_trap();
      if (!l.tenant.empty() && !c.tenant(l.tenant)) __builtin_trap();
    }
  } catch (const nsbox::ProfileError&) {
  }
  return 0;
}
