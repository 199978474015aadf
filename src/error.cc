#include "nsbox/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nsbox/unique_fd.h"

namespace nsbox {

std::string format_sys_error(const std::string& step, const std::string& object, int err) {
  std::string msg = step;
  if (!object.empty()) msg += " " + object;
  msg += ": ";
  msg += err ? std::strerror(err) : "failed";
  return msg;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9F &&
        static_cast<unsigned char>(text[i + 1]) >= 0x80) {
      out += '?';  // a C1 control, UTF-8 encoded
      ++i;
    } else {
      out += c < 0x20 || c == 0x7F ? '?' : static_cast<char>(c);
    }
  }
  return out;
}

SysError::SysError(std::string step, std::string object, int err)
    : std::runtime_error(format_sys_error(step, object, err)),
      step_(std::move(step)),
      object_(std::move(object)),
      err_(err) {}

Pipe Pipe::create(int extra_flags) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | extra_flags) != 0) throw SysError("pipe2", "", errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace nsbox
