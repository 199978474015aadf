// `nsbox run` hands a terminal to the run as its stdout or stderr (open for
// writing only). A run may still change that terminal for good through it:
// its modes (echo off, raw mode), exclusive mode (TIOCEXCL: every later
// open of it by the operator's programs fails with EBUSY), stopped output
// (tcflow TCOOFF) and its line discipline (seccomp refuses TIOCSETD; this
// is the second line). TerminalModes saves them for each terminal among
// fds 0, 1 and 2 before the run and puts back what the run changed after
// it. The window size is not saved: a resize during the run is the
// operator's.
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

  // Puts back each saved terminal's line discipline and exclusive mode, and
  // restarts its output; then its modes, unless nsbox is then a background
  // job of that terminal (the foreground job owns its modes by then).
  // Once only.
  void restore();

 private:
  struct Saved {
    UniqueFd fd;  // our own descriptor of it, for after the relay put the caller's back
    termios modes{};
    int exclusive = 0;
    int discipline = 0;  // N_TTY
  };
  std::vector<Saved> saved_;
};

}  // namespace nsbox
