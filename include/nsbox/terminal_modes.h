// `nsbox run` hands a terminal to the run as its stdout or stderr (open for
// writing only). A run may still change that terminal for good through it:
// its modes (echo off, raw mode), exclusive mode (TIOCEXCL: every later
// open of it by the operator's programs fails with EBUSY) and stopped output
// (tcflow TCOOFF). TerminalModes saves them for each terminal among fds 0,
// 1 and 2 before the run and puts back what the run changed after it.
#pragma once

#include <termios.h>

#include <vector>

#include "nsbox/unique_fd.h"

namespace nsbox {

class TerminalModes {
 public:
  // Saves the state of each distinct terminal among fds 0, 1 and 2.
  TerminalModes();
  ~TerminalModes() { restore(); }
  TerminalModes(const TerminalModes&) = delete;
  TerminalModes& operator=(const TerminalModes&) = delete;

  // Puts back each saved terminal's modes and exclusive mode, and restarts
  // its output. Skipped for a terminal of which nsbox is then a background
  // job: the foreground job owns its modes by then. Once only.
  void restore();

 private:
  struct Saved {
    UniqueFd fd;  // our own descriptor of it, for after the relay put the caller's back
    termios modes{};
    int exclusive = 0;
  };
  std::vector<Saved> saved_;
};

}  // namespace nsbox
