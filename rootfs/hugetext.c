/* nsbox fork server for Node: moves the node binary's code onto transparent
 * huge pages in the zygote, so that each forked run inherits it through a
 * handful of page-table entries instead of faulting it in again page by
 * page (docs/PERFORMANCE.md, "Node's code on huge pages").
 *
 * A fork does not copy the page tables of a file mapping such as node's
 * code: each run faults back in what it executes (about 13 MiB of node's
 * 36 MiB), and its exit unmaps it again. Anonymous memory is copied at the
 * fork instead, and a 2 MiB huge page costs one entry to copy and one to
 * unmap. Node's own --use-largepages does the same, but only when it can
 * read /sys/kernel/mm/transparent_hugepage/enabled, which the sandbox does
 * not show.
 *
 * The copy replaces the code with one mremap: the other threads of the
 * zygote, blocked in system calls, return into the same bytes. The result
 * is checked, not assumed: if the kernel gives no huge pages (THP off, or
 * no contiguous memory), the code stays where it was. Built by
 * tools/build-rootfs into forkinit.node. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE (2UL << 20)

static uintptr_t round_up(uintptr_t v) { return (v + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }
static uintptr_t round_down(uintptr_t v) { return v & ~(HUGE_PAGE - 1); }

/* The largest executable mapping of this program's own file (its code;
 * the linker splits off small pieces around it): [*start, *end). */
static int find_program_code(uintptr_t* start, uintptr_t* end) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) return -1;
  exe[n] = '\0';
  FILE* maps = fopen("/proc/self/maps", "re");
  if (!maps) return -1;
  char line[PATH_MAX + 128];
  int found = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long from, to;
    char perms[5];
    int path_at = 0;
    if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &from, &to, perms, &path_at) < 3 || path_at == 0) continue;
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(perms, "r-xp") == 0 && strcmp(line + path_at, exe) == 0 && (!found || to - from > *end - *start)) {
      *start = from;
      *end = to;
      found = 1;
    }
  }
  fclose(maps);
  if (!found) errno = ENOENT;
  return found ? 0 : -1;
}

/* Bytes of the mapping that starts at `at` that are on huge pages. */
static long huge_bytes_at(uintptr_t at) {
  FILE* smaps = fopen("/proc/self/smaps", "re");
  if (!smaps) return -1;
  char line[PATH_MAX + 128];
  int in_mapping = 0;
  long kib = -1;
  while (fgets(line, sizeof line, smaps)) {
    unsigned long from, to;
    if (sscanf(line, "%lx-%lx ", &from, &to) == 2)
      in_mapping = from == at;
    else if (in_mapping && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
      break;
  }
  fclose(smaps);
  if (kib < 0) errno = ENOENT;
  return kib < 0 ? -1 : kib * 1024;
}

/* A 2 MiB-aligned anonymous mapping of `size` bytes, or MAP_FAILED. */
static void* map_aligned(size_t size) {
  char* area = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return MAP_FAILED;
  char* aligned = (char*)round_up((uintptr_t)area);
  if (aligned > area) munmap(area, (size_t)(aligned - area));
  char* tail = aligned + size;
  if (tail < area + size + HUGE_PAGE) munmap(tail, (size_t)(area + size + HUGE_PAGE - tail));
  return aligned;
}

/* In the zygote: the bytes of code moved onto huge pages (0: none, the code
 * stays file-backed), or -1 with errno when a step failed. The copy is
 * checked to be node's code byte for byte and all huge pages before it
 * replaces the code; mremap moves them as they are. */
long nsbox_code_on_huge_pages(void);
long nsbox_code_on_huge_pages(void) {
  uintptr_t from, to;
  if (find_program_code(&from, &to) < 0) return -1;
  uintptr_t start = round_up(from), end = round_down(to);
  if (end <= start) return 0;
  size_t size = end - start;
  void* copy = map_aligned(size);
  if (copy == MAP_FAILED) return -1;
  long moved = 0;
  /* madvise fails with EINVAL on a kernel without THP: nothing to gain. */
  if (madvise(copy, size, MADV_HUGEPAGE) == 0) {
    memcpy(copy, (const void*)start, size);
    /* Checked byte for byte (a few ms, once per zygote): code that differs
     * from node's would run in every forked run. */
    if (memcmp(copy, (const void*)start, size) != 0) {
      errno = EIO;
      moved = -1;
    } else if (huge_bytes_at((uintptr_t)copy) == (long)size) {
      if (mprotect(copy, size, PROT_READ | PROT_EXEC) < 0) moved = -1;
      /* Atomic for the other threads: the old mapping is replaced whole. */
      else if (mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void*)start) == MAP_FAILED)
        moved = -1;
      else
        return (long)size;
    }
  }
  int saved = errno;
  munmap(copy, size);
  errno = saved;
  return moved;
}
