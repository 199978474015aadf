// nsbox fork server for Node: tells Node's V8 platform, in a forked run's
// workload, that it has no worker threads (docs/SECURITY.md, "The
// JavaScript fork server").
//
// The zygote's platform has worker threads; a forked workload has none, but
// the platform still counts them. V8 jobs (a mark-compact's weak-reference
// clearing, for one, even under --single-threaded) then post work for them:
// it is never run, and Node, when the event loop empties, waits for it for
// ever (NodePlatform::DrainTasks), so a run whose promise never settles hit
// its deadline instead of ending with its error, once the zygote had served
// enough runs for a run's first GC to be a mark-compact. With no worker
// threads counted, a job runs on the thread that joins it, and none is
// posted.
//
// C++ because the slot of NumberOfWorkerThreads in v8::Platform's vtable is
// computed from Node's own headers (the Itanium C++ ABI), not written down.
// Built by tools/build-rootfs into forkinit.node with forkinit.c and
// forknode.c.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <v8-platform.h>

// Exported by the node binary (V8's debug interface).
namespace v8::debug {
v8::Platform* GetCurrentPlatform();
}

namespace {

int no_worker_threads(v8::Platform*) { return 0; }

// Where the vtable of `platform` holds NumberOfWorkerThreads, or nullptr.
void** worker_count_slot(v8::Platform* platform) {
  int (v8::Platform::*member)() = &v8::Platform::NumberOfWorkerThreads;
  // A pointer to a virtual member function: 1 + its byte offset in the
  // vtable, and a this-adjustment.
  struct {
    uintptr_t ptr;
    ptrdiff_t adj;
  } rep;
  static_assert(sizeof rep == sizeof member, "an Itanium ABI pointer to member function");
  std::memcpy(&rep, &member, sizeof rep);
  if (!(rep.ptr & 1) || rep.adj != 0) return nullptr;
  char* vtable = *reinterpret_cast<char**>(platform);
  return reinterpret_cast<void**>(vtable + (rep.ptr - 1));
}

}  // namespace

// In the workload: 0 once the platform reports no worker threads, -1 when it
// cannot be made to (errno says why when a system call failed).
extern "C" int nsbox_platform_without_workers(void) {
  v8::Platform* platform = v8::debug::GetCurrentPlatform();
  if (!platform) return -1;
  void** slot = worker_count_slot(platform);
  if (!slot) return -1;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page - 1));
  // The vtable is read-only after relocation; this process's copy of its
  // page is written, the zygote's stays as it is.
  if (mprotect(start, page, PROT_READ | PROT_WRITE) != 0) return -1;
  *slot = reinterpret_cast<void*>(&no_worker_threads);
  if (mprotect(start, page, PROT_READ) != 0) return -1;
  return platform->NumberOfWorkerThreads() == 0 ? 0 : -1;
}
