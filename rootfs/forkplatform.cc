// nsbox fork server for Node: tells Node's V8 platform, in the zygote and
// so in every forked run, that it has no worker threads (docs/SECURITY.md,
// "The JavaScript fork server").
//
// The zygote's platform has worker threads; a forked workload has none, but
// the platform would still count them. V8 jobs (a mark-compact's
// weak-reference clearing, for one, even under --single-threaded) post work
// for them, and Node, when the event loop empties, waits until all posted
// work has run (NodePlatform::DrainTasks). In a workload that work never
// runs: a run whose promise never settles hit its deadline instead of
// ending with its error. Two ways in: the run's own full GC, and a full GC
// of the zygote shortly before the fork, whose posted work the zygote's
// threads had not yet taken when the workload copied the queue. So the
// zygote counts no worker threads from its start: a job runs on the thread
// that joins it, and nothing is ever posted to a worker, in the zygote or
// in a run.
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

// In the zygote: 0 once the platform reports no worker threads, -1 when it
// cannot be made to (errno says why when a system call failed).
extern "C" int nsbox_platform_without_workers(void) {
  v8::Platform* platform = v8::debug::GetCurrentPlatform();
  if (!platform) return -1;
  void** slot = worker_count_slot(platform);
  if (!slot) return -1;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page - 1));
  // The vtable is read-only after relocation: this process's copy of its
  // page is written (the node binary's file is not).
  if (mprotect(start, page, PROT_READ | PROT_WRITE) != 0) return -1;
  *slot = reinterpret_cast<void*>(&no_worker_threads);
  if (mprotect(start, page, PROT_READ) != 0) return -1;
  return platform->NumberOfWorkerThreads() == 0 ? 0 : -1;
}

// In a workload: whether the platform it inherited counts no worker threads
// (a zygote that did not call nsbox_platform_without_workers fails every run).
extern "C" int nsbox_platform_counts_no_workers(void) {
  v8::Platform* platform = v8::debug::GetCurrentPlatform();
  return platform && platform->NumberOfWorkerThreads() == 0;
}
