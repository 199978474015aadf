// `nsbox run` without --json hands the workload nsbox's own stdin, stdout
// and stderr. A descriptor of a file gives a run more than a stream: the
// file's host path (readlink /proc/self/fd/1), its earlier contents (opened
// again through that link, as the sandbox user may read it) and ftruncate;
// a socket lets it connect (a TCP one, disconnected with AF_UNSPEC) or send
// from the caller's network namespace, and shut the caller's stream down.
// Such a descriptor (a file, a block device, a named FIFO, a connected
// stream socket, and a terminal as stdin) is swapped for a pipe that a
// thread of nsbox copies to or from it; a directory, and a socket that is
// not a connected stream, are refused. An anonymous pipe, and a terminal as
// stdout or stderr, are opened anew (the terminal for writing only: the
// caller's description is usually its stdin's too, through which the run
// would read what the operator types), so that flags the run sets on them
// are not the caller's. Other devices are handed over as they are.
#pragma once

#include <sys/types.h>
#include <atomic>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nsbox/unique_fd.h"

namespace nsbox {

class StdioRelay {
 public:
  // Swaps each of fds 0, 1 and 2 that needs it for a pipe, or a
  // description of its own (above). At most max_output_bytes of each output reach its
  // file (the run's RLIMIT_FSIZE, which it no longer meets there); the
  // rest is read and dropped. Throws UsageError for a directory or a
  // socket that cannot be relayed, SysError when a pipe cannot be made.
  explicit StdioRelay(uint64_t max_output_bytes);
  ~StdioRelay();
  StdioRelay(const StdioRelay&) = delete;
  StdioRelay& operator=(const StdioRelay&) = delete;

  // Puts the original descriptors back and waits until what the run wrote
  // has reached them, or, once give_up_fd is readable (nsbox was told to
  // stop, or the run's time is up), only as long as they take it without
  // waiting: a FIFO or socket whose reader stopped reading would otherwise
  // hold nsbox for good. Returns
  // what went wrong on the way (a full disk, the cap reached, output
  // dropped), one line each.
  std::vector<std::string> finish(int give_up_fd = -1);

 private:
  struct Lane {
    std::vector<int> targets;  // the stdio numbers it stands in for
    UniqueFd original;         // the file, as the caller gave it
    UniqueFd ours;             // our end of the pipe (non-blocking)
    bool input = false;
    uint64_t copied = 0;        // output: bytes written to the file
    off_t start = -1;           // input: the caller's offset at the start (-1: not seekable)
    off_t relayed = 0;          // input: bytes put into the pipe
    UniqueFd unread_probe;      // input: a read end, to count what the run left unread
    UniqueFd reader;            // input from a terminal or FIFO: our own non-blocking description
    UniqueFd writer;            // output to a named FIFO: our own non-blocking description
    bool socket = false;        // the caller's is a connected stream socket (no cap, send/recv)
    int flags_to_restore = -1;  // a pipe handed over as it is: its file status flags before the run
    std::string problem;
    std::thread thread;
  };
  void add_lane(std::vector<int> targets, bool input);
  // No thread: the targets get a description of their own of the same
  // pipe, or of the same terminal open for writing only.
  void reopen(std::vector<int> targets);
  void pump_output(Lane& lane);
  void pump_input(Lane& lane);
  // Waits up to 100 ms for events on fd; false once finish() has begun
  // and nothing came.
  bool wait_for(int fd, short events);
  // Waits up to 100 ms until fd takes more output; false once finish()
  // was told to give up and fd still takes none.
  bool wait_for_room(int fd);
  static std::string lane_name(const Lane& lane);

  uint64_t max_output_bytes_;
  std::atomic<bool> finishing_{false};
  std::atomic<int> give_up_fd_{-1};
  std::vector<std::unique_ptr<Lane>> lanes_;
  bool finished_ = false;
};

}  // namespace nsbox
