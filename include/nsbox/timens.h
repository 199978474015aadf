// A run's own time namespace (docs/SECURITY.md, "Clocks").
#pragma once

namespace nsbox {

// In a started sandbox's PID 1: makes a time namespace whose CLOCK_MONOTONIC
// and CLOCK_BOOTTIME read between 1 and 2 seconds now, and enters it, so
// that the workload starts in it whether it shares PID 1's memory or not.
// Needs CAP_SYS_ADMIN and CAP_SYS_TIME in PID 1's user namespace, a /proc
// that shows PID 1 and owns its /proc/self to it, and no other process
// sharing its memory. Returns 0, or an errno with *step set to the step
// that failed. Async-signal-safe: it runs between clone and execve.
int enter_own_time_namespace(const char** step) noexcept;

}  // namespace nsbox
