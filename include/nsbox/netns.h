// Network namespace: the sandbox's is empty but for loopback.
#pragma once

namespace nsbox {

// Brings `lo` up in the caller's network namespace. Async-signal-safe;
// returns 0 or errno.
int bring_up_loopback() noexcept;

}  // namespace nsbox
