#include "nsbox/check.h"

#include <stdexcept>

namespace nsbox {

int run_check(const std::vector<std::string>& files, bool from_openjiuwen, const ProfileSearch& search,
              std::ostream& out, std::ostream& err) {
  if (files.empty()) {
    err << "nsbox check: no profile given\n";
    return 1;
  }
  int status = 0;
  for (const auto& file : files) {
    try {
      Profile p = from_openjiuwen ? load_openjiuwen_config(file, search) : load_profile(file, search);
      out << "---\n" << to_yaml(p);
    } catch (const ProfileError& e) {
      err << e.what() << "\n";
      status = 1;
    } catch (const std::invalid_argument& e) {
      err << e.what() << "\n";
      status = 1;
    }
  }
  out.flush();
  return status;
}

}  // namespace nsbox
