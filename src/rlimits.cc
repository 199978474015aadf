#include "nsbox/rlimits.h"

#include <cerrno>

namespace nsbox {
namespace {

const char* resource_name(int resource) {
  switch (resource) {
    case RLIMIT_CORE: return "RLIMIT_CORE";
    case RLIMIT_NOFILE: return "RLIMIT_NOFILE";
    case RLIMIT_FSIZE: return "RLIMIT_FSIZE";
    default: return "rlimit";
  }
}

}  // namespace

std::vector<RlimitSetting> rlimits_for(const Limits& limits) {
  return {
      {RLIMIT_CORE, {0, 0}},
      {RLIMIT_NOFILE, {limits.open_files, limits.open_files}},
      {RLIMIT_FSIZE, {limits.file_size, limits.file_size}},
  };
}

int apply_rlimits(const RlimitSetting* settings, size_t count, const char** name) noexcept {
  for (size_t i = 0; i < count; ++i) {
    if (setrlimit(static_cast<__rlimit_resource>(settings[i].resource), &settings[i].value) != 0) {
      *name = resource_name(settings[i].resource);
      return errno;
    }
  }
  return 0;
}

}  // namespace nsbox
