/* nsbox fork server for Node: undoes MADV_DONTFORK on every anonymous
 * mapping before a run is forked (docs/SECURITY.md, "The JavaScript fork
 * server").
 *
 * Node's V8 marks the memory it maps MADV_DONTFORK (so that
 * child_process.spawn copies little), and a run's workload is a fork of the
 * zygote: without its heap and code space, it dies by SIGSEGV at the first
 * touch of a missing page. Every anonymous mapping counts, whatever
 * /proc/self/maps calls it: Linux 6.1 names a mapping that starts at a
 * page-aligned program break "[heap]", and this step used to skip every
 * named mapping. (In CI's cgroup v2 guest, which runs 6.1, a few zygote
 * starts in a thousand gave runs that all died by SIGSEGV reading a page of
 * V8's code space; this is the gap found that can leave such a page out.)
 * Anonymous means private with inode 0: file mappings are copied anyway,
 * and shared mappings (shmem, memfd, SysV shm) keep what was advised: this
 * step never makes a run share pages with its zygote. Built by
 * tools/build-rootfs into forkinit.node, and by the tests
 * (tests/integration/fork_maps_test.cc). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "forkinit.h"

int nsbox_allow_fork_of_anonymous_mappings(void) {
  FILE* maps = fopen("/proc/self/maps", "re");
  if (!maps) return -1;
  char* line = NULL;
  size_t capacity = 0;
  while (getline(&line, &capacity, maps) > 0) {
    unsigned long start, end, inode;
    char perms[5];
    /* start-end perms offset dev inode [name]; perms[3] is 'p' (private)
     * or 's' (shared: SysV shm can have inode 0) */
    if (sscanf(line, "%lx-%lx %4s %*s %*s %lu", &start, &end, perms, &inode) != 4 || perms[3] != 'p' || inode != 0)
      continue;
    /* Fails only on mappings that fork never copies anyway ([vvar], which
     * is VM_IO): nothing to undo there. */
    madvise((void*)start, end - start, MADV_DOFORK);
  }
  int failed = ferror(maps);
  free(line);
  fclose(maps);
  if (failed) errno = EIO;
  return failed ? -1 : 0;
}
