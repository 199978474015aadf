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

/* Whether a failed madvise of [start, end) left nothing of the run's memory
 * out. EINVAL comes from a VM_IO mapping ([vvar]), which fork does not copy
 * as memory. ENOMEM comes from an address with nothing mapped ([vsyscall] is
 * not a mapping; a mapping freed since the maps were read is not needed by
 * the run), but also from a failure to split or merge the mapping, which
 * leaves its advice as it was: msync tells them apart, answering ENOMEM only
 * when part of the range is not mapped. Any other error may leave a mapping
 * out of the run, which would crash at its first touch: the run fails
 * instead. */
static int leaves_nothing_out(int err, unsigned long start, unsigned long end) {
  if (err == EINVAL) return 1;
  return err == ENOMEM && msync((void*)start, end - start, MS_ASYNC) != 0 && errno == ENOMEM;
}

int nsbox_allow_fork_of_anonymous_mappings(struct nsbox_failed_step* failed) {
  failed->step = "read";
  failed->object = "/proc/self/maps";
  FILE* maps = fopen("/proc/self/maps", "re");
  if (!maps) return -1;
  char* line = NULL;
  size_t capacity = 0;
  int err = 0;
  for (;;) {
    errno = 0; /* getline's, if it fails */
    if (getline(&line, &capacity, maps) < 0) break;
    unsigned long start, end, inode;
    char perms[5];
    /* start-end perms offset dev inode [name]; perms[3] is 'p' (private)
     * or 's' (shared: SysV shm can have inode 0) */
    if (sscanf(line, "%lx-%lx %4s %*s %*s %lu", &start, &end, perms, &inode) != 4 || perms[3] != 'p' || inode != 0)
      continue;
    if (madvise((void*)start, end - start, MADV_DOFORK) == 0) continue;
    const int advise_err = errno;
    if (!leaves_nothing_out(advise_err, start, end)) {
      err = advise_err;
      failed->step = "madvise MADV_DOFORK";
      failed->object = "an anonymous mapping";
      break;
    }
  }
  /* getline answers -1 at the end of the file and on an error (ENOMEM):
   * only the end of the file means every mapping was seen. */
  if (!err && (ferror(maps) || !feof(maps))) err = errno ? errno : EIO;
  free(line);
  fclose(maps);
  errno = err;
  return err ? -1 : 0;
}
