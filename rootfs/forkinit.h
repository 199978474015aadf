/* The fork servers' run PID 1 (forkinit.c), as zygote.py (ctypes) and
 * zygote.js (forknode.c) call it, and what it execs (nsbox-init.c). */
#ifndef NSBOX_FORKINIT_H
#define NSBOX_FORKINIT_H

#include <stddef.h>

#define SETUP_FAILED_EXIT 125 /* kSetupFailedExit */

/* How long the run's PID 1 waits for nsbox to answer its 'P' (its cgroup),
 * while it holds its fork server: as long as nsbox waits for the run's init. */
#define JOIN_ANSWER_TIMEOUT_MS 10000

/* What PID 1 execs once the run is set up and its workload forked, and the
 * environment variable that tells it "RUN_FD REPORT_FD WORKLOAD_PID". */
#define NSBOX_INIT_PATH "/opt/nsbox/nsbox-init"
#define NSBOX_INIT_ENV "NSBOX_INIT"

/* The request's fds, in the order nsbox sends them (sandbox.cc). */
enum { FD_RUN, FD_STDIN, FD_STDOUT, FD_STDERR, FD_RESULT, FD_ERROR, FD_REPORT, FD_COUNT };

enum mount_kind {
  MOUNT_REQUIRED = 0,
  MOUNT_OPTIONAL = 1, /* a mask of a path that does not exist is a no-op */
  MOUNT_MASK_FILE = 2 /* /dev/null bound on an optional path, then made read-only */
};

/* The layouts zygote.py builds with ctypes and forknode.c in C. */
struct nsbox_mount {
  const char* source;
  const char* target;
  const char* fstype;
  unsigned long flags;
  const char* data;
  int kind;
};

struct nsbox_rlimit {
  int resource;
  unsigned long long soft;
  unsigned long long hard;
};

/* A quota of the run's user namespace: a file of /proc/sys/user
 * (userns.h's UserNsQuota). */
struct nsbox_quota {
  const char* name;
  unsigned long long value;
};

struct nsbox_run {
  int fds[FD_COUNT];
  int control_fd;
  unsigned uid;
  unsigned gid;
  const struct nsbox_mount* mounts;
  int mount_count;
  const char* workspace_out; /* made after the mounts, or NULL */
  const char* hostname;
  const struct nsbox_rlimit* rlimits;
  int rlimit_count;
  const struct nsbox_quota* quotas;
  int quota_count;
};

/* In the zygote: clones the run's PID 1, which shares the zygote's memory
 * while it sets the run up and forks the workload, then execs nsbox-init;
 * the zygote waits until then. Returns PID 1's pid in the zygote, 0 in the
 * workload, -errno when the clone fails. */
long nsbox_fork_run(const struct nsbox_run* run);

/* Rewrites this process's argv area (what /proc/PID/cmdline shows). */
void nsbox_set_cmdline(const char* text, size_t len);

/* The step and object of a failure, for its message: static strings. */
struct nsbox_failed_step {
  const char* step;
  const char* object;
};

/* In the Node zygote, before each run is forked (forkmaps.c): every
 * anonymous mapping is copied by fork again, whatever V8 advised. 0, or -1
 * with errno and *failed set when /proc/self/maps could not be read whole
 * or a mapping could not be advised. */
int nsbox_allow_fork_of_anonymous_mappings(struct nsbox_failed_step* failed);

#endif
