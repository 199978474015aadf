// Network namespace: the sandbox's is empty but for loopback.
#pragma once

#include <cstdint>

namespace nsbox {

// Brings `lo` up in the caller's network namespace. Async-signal-safe;
// returns 0 or errno.
int bring_up_loopback() noexcept;

// Creates a TCP socket listening on 127.0.0.1:port in the caller's network
// namespace. Async-signal-safe; returns the fd, or -errno.
int listen_on_loopback(uint16_t port) noexcept;

}  // namespace nsbox
