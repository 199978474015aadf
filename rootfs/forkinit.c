/* nsbox fork server: the run's PID 1, in C (docs/ARCHITECTURE.md, "Fork
 * server").
 *
 * zygote.py loads this library (forkinit.so) and zygote.js the same code as
 * a Node add-on (forkinit.node, with forknode.c); each calls nsbox_fork_run()
 * for each request. It clones the run's PID 1 into a new user and pid
 * namespace, sharing the zygote's memory, as vfork() does: the zygote waits
 * until PID 1 execs. PID 1 sets the run up here, forks the workload (the
 * run's only copy of the zygote's memory), and execs nsbox-init
 * (nsbox-init.c), which reaps and reports; the workload jumps back into
 * nsbox_fork_run(), returns 0 into the zygote's code and becomes the runner.
 *
 * Why C: PID 1 runs while it shares the zygote's memory, so it must touch
 * nothing of it but its own stack (no allocation, no interpreter). Why
 * shared: a copy of the zygote for PID 1 cost a page-table copy at the
 * clone and a teardown at PID 1's exit, in every run, and its pages stayed
 * shared with the zygote for the whole run.
 *
 * Built by tools/build-rootfs into /opt/nsbox/forkinit.so with the host's
 * compiler and glibc headers; the host and the tree are the same Debian
 * release, so the tree's glibc has every symbol it uses (checked there).
 * Failures go to the error fd as nsbox's ChildFailure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "forkinit.h"

/* nsbox's ChildFailure. */
struct child_failure {
  char step[48];
  char object[4000];
  int32_t err;
};

static void report_failure(int fd, const char* step, const char* object, int err) {
  struct child_failure f;
  memset(&f, 0, sizeof f);
  strncpy(f.step, step, sizeof f.step - 1);
  strncpy(f.object, object, sizeof f.object - 1);
  f.err = err;
  ssize_t ignored = write(fd, &f, sizeof f);
  (void)ignored;
}

/* Ends PID 1's set-up with nsbox's ChildFailure; never returns. */
static void fail(const struct nsbox_run* run, const char* step, const char* object, int err) {
  report_failure(run->fds[FD_ERROR], step, object, err);
  _exit(SETUP_FAILED_EXIT);
}

static void write_file(const struct nsbox_run* run, const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(run, "write", path, errno);
  size_t len = strlen(text);
  if (write(fd, text, len) != (ssize_t)len) fail(run, "write", path, errno);
  close(fd);
}

enum { MAX_MESSAGE_FDS = 7 };

/* Room for the fds of one message on the run socket, aligned for cmsghdr. */
union message_control {
  char bytes[CMSG_SPACE(sizeof(int) * MAX_MESSAGE_FDS)];
  struct cmsghdr align;
};

/* A one-byte message at *byte, with room for fds in *control (zeroed). */
static struct msghdr one_byte_message(char* byte, struct iovec* iov, union message_control* control, size_t fd_count) {
  memset(control, 0, sizeof *control);
  iov->iov_base = byte;
  iov->iov_len = 1;
  struct msghdr msg = {.msg_iov = iov,
                       .msg_iovlen = 1,
                       .msg_control = control->bytes,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * fd_count)};
  return msg;
}

/* Sends one byte of tag: nsbox learns this process's pid from the
 * credentials the kernel attaches, and opens its pidfd while this process
 * waits for the answer. No descriptor is sent: this process has the
 * sandboxes' host user, whose descriptors in flight another run can push
 * past any limit (ETOOMANYREFS). */
static void send_self(const struct nsbox_run* run, char tag) {
  ssize_t n;
  do n = send(run->fds[FD_RUN], &tag, 1, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != 1) fail(run, "sendmsg", "run socket", errno);
}

/* Gets this process into the run's cgroup. Until then the memory it
 * touches stays charged to the fork server's cgroup, so it does nothing
 * else first. nsbox answers 'c' once it has moved this process (cgroup v2),
 * or 'j' with the run's tasks files, opened by nsbox (v1): this process
 * joins by writing "0" to each, as moving oneself takes no global lock on
 * this kernel, unlike a move by pid. nsbox checks the result. */
static void join_run_cgroup(const struct nsbox_run* run) {
  send_self(run, 'P');
  /* The fork server is held (CLONE_VFORK) until this process execs or
   * exits: a supervisor that stalls before it answers (stopped, starved)
   * must not hold every fork of the profile behind it. It gives up on
   * this run after as long (nsbox's "no run init within 10 s"). */
  struct pollfd answered = {.fd = run->fds[FD_RUN], .events = POLLIN};
  int ready;
  do ready = poll(&answered, 1, JOIN_ANSWER_TIMEOUT_MS);
  while (ready < 0 && errno == EINTR);
  if (ready == 0) fail(run, "join cgroup", "nsbox's answer (none within 10 s)", ETIMEDOUT);
  char answer = 0;
  union message_control control;
  struct iovec iov;
  struct msghdr msg = one_byte_message(&answer, &iov, &control, MAX_MESSAGE_FDS);
  ssize_t n;
  do n = recvmsg(run->fds[FD_RUN], &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n != 1 || (answer != 'c' && answer != 'j') || (msg.msg_flags & MSG_CTRUNC)) _exit(SETUP_FAILED_EXIT);
  size_t joined = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int fds[MAX_MESSAGE_FDS];
    memcpy(fds, CMSG_DATA(c), count * sizeof(int));
    for (size_t i = 0; i < count; ++i) {
      ssize_t w;
      do w = write(fds[i], "0", 1);
      while (w < 0 && errno == EINTR);
      if (w != 1) fail(run, "join cgroup", "tasks", w < 0 ? errno : EIO);
      close(fds[i]);
      ++joined;
    }
  }
  if (answer == 'j' && joined == 0) fail(run, "join cgroup", "tasks (none received)", EPROTO);
}

/* Maps the zygote's single uid and gid in the run's user namespace, then
 * makes the run's other namespaces, owned by it. This process is in the
 * run's cgroup by now: their memory is the run's, and the cgroup namespace
 * is rooted at the run's cgroup. */
static void enter_run_namespaces(const struct nsbox_run* run) {
  char map[64];
  write_file(run, "/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%u %u 1", run->uid, run->uid);
  write_file(run, "/proc/self/uid_map", map);
  snprintf(map, sizeof map, "%u %u 1", run->gid, run->gid);
  write_file(run, "/proc/self/gid_map", map);
  if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
    fail(run, "unshare", "run namespaces", errno);
}

/* What ps shows: rewrites this process's argv area (/proc/PID/cmdline) in
 * place with text (len bytes, NULs between the arguments), padded with NULs
 * or cut to the room the original had. */
void nsbox_set_cmdline(const char* text, size_t len) {
  char stat[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0) return;
  stat[n] = 0;
  /* arg_start and arg_end are fields 48 and 49, the 46th and 47th after the
   * closing parenthesis of the command name. */
  char* p = strrchr(stat, ')');
  unsigned long start = 0, end = 0;
  for (int field = 2; p && field <= 49; ++field) {
    p = strchr(p + 1, ' ');
    if (p && field == 47) start = strtoul(p + 1, NULL, 10);
    if (p && field == 48) end = strtoul(p + 1, NULL, 10);
  }
  if (!start || end <= start) return;
  size_t room = end - start;
  memset((void*)start, 0, room);
  memcpy((void*)start, text, len < room ? len : room - 1);
}

/* The run's user namespace's quotas (userns.cc says why), through the
 * zygote's /proc, which acts on this process's own namespace: the run's
 * fresh one, in which it holds every capability. A file the kernel lacks
 * is a feature it lacks, with nothing to bound. */
static void set_user_ns_quotas(const struct nsbox_run* run) {
  int dir = open("/proc/sys/user", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail(run, "set user namespace quota", "/proc/sys/user", errno);
  for (int i = 0; i < run->quota_count; ++i) {
    const struct nsbox_quota* q = &run->quotas[i];
    if (!q->name || !*q->name || strchr(q->name, '/')) fail(run, "set user namespace quota", "(a bad name)", EINVAL);
    int fd = openat(dir, q->name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      fail(run, "set user namespace quota", q->name, errno);
    }
    char value[24];
    int len = snprintf(value, sizeof value, "%llu", q->value);
    ssize_t written = write(fd, value, (size_t)len);
    if (written != len) fail(run, "set user namespace quota", q->name, written < 0 ? errno : EIO);
    close(fd);
  }
  close(dir);
}

/* What one run may write or see of other runs is made fresh for it; the
 * rest (rootfs, binds, masks outside /proc) comes from the zygote's mount
 * namespace, locked: this user namespace cannot unmount or change it. */
static void build_mounts(const struct nsbox_run* run) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) fail(run, "mount bind", "/", errno);
  for (int i = 0; i < run->mount_count; ++i) {
    const struct nsbox_mount* m = &run->mounts[i];
    if (mount(m->source, m->target, m->fstype, m->flags, m->data) < 0) {
      if (m->kind != MOUNT_REQUIRED && errno == ENOENT) continue;
      char step[48];
      snprintf(step, sizeof step, "mount %s", m->fstype ? m->fstype : "bind");
      fail(run, step, m->target, errno);
    }
    if (m->kind == MOUNT_MASK_FILE &&
        mount(NULL, m->target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
      fail(run, "mount bind", m->target, errno);
  }
  if (run->workspace_out && mkdir(run->workspace_out, 0755) < 0) fail(run, "mkdir", run->workspace_out, errno);
}

static void bring_up_loopback(const struct nsbox_run* run) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail(run, "bring up", "lo", errno);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) fail(run, "bring up", "lo", errno);
  close(s);
}

static void apply_rlimits(const struct nsbox_run* run) {
  for (int i = 0; i < run->rlimit_count; ++i) {
    struct rlimit value = {.rlim_cur = run->rlimits[i].soft, .rlim_max = run->rlimits[i].hard};
    if (setrlimit(run->rlimits[i].resource, &value) < 0) {
      char what[16];
      snprintf(what, sizeof what, "%d", run->rlimits[i].resource);
      fail(run, "setrlimit", what, errno);
    }
  }
}

/* What nsbox's own child does (caps.cc): empty bounding and ambient sets,
 * locked securebits, no capability left, no_new_privs. */
static void drop_privileges(const struct nsbox_run* run) {
  /* SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE
   * and their locks. */
  if (prctl(PR_SET_SECUREBITS, 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80, 0, 0, 0) < 0)
    fail(run, "lock securebits", "run init", errno);
  for (int cap = 0; cap < 64; ++cap)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)  // EINVAL: past the last
      fail(run, "drop bounding capability", "run init", errno);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
    fail(run, "clear ambient capabilities", "run init", errno);
  struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) < 0) fail(run, "clear capabilities", "run init", errno);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(run, "prctl", "PR_SET_NO_NEW_PRIVS", errno);
}

/* The zygote's control socket carries every run's request: the run must
 * not hold it. Its fd number stays taken (by /dev/null) until the workload
 * puts the result fd there: fork handlers that run in the workload (libuv's
 * make a pipe) would otherwise get it, and lose it to that dup2. */
static void forget_control_socket(const struct nsbox_run* run, int null) {
  if (dup3(null, run->control_fd, O_CLOEXEC) < 0) fail(run, "dup3", "control socket", errno);
}

/* In the workload: waits until PID 1 has become nsbox-init and made itself
 * not dumpable again (the exec made it dumpable), which nsbox-init says by
 * closing the gate's other end. Until then a run's code could open PID 1's
 * /proc files. A PID 1 that died ends the run: going on is harmless. */
static void wait_for_nsbox_init(int gate) {
  char byte;
  while (read(gate, &byte, 1) < 0 && errno == EINTR) {
  }
  close(gate);
}

/* PID 1 stops sharing the zygote's memory here: it execs nsbox-init with
 * the run socket, the report fd and the workload's pid, and the zygote,
 * waiting since the clone, goes on. Nothing of the zygote's stays open
 * (stdio becomes /dev/null; nsbox-init closes the rest). */
static void become_nsbox_init(const struct nsbox_run* run, int null, pid_t workload) {
  for (int fd = 0; fd < 3; ++fd)
    if (dup2(null, fd) < 0) fail(run, "dup2", "stdio of PID 1", errno);
  close(null);
  for (int i = FD_STDIN; i <= FD_ERROR; ++i) fcntl(run->fds[i], F_SETFD, FD_CLOEXEC);
  if (fcntl(run->fds[FD_RUN], F_SETFD, 0) < 0 || fcntl(run->fds[FD_REPORT], F_SETFD, 0) < 0)
    fail(run, "fcntl", "fds of PID 1", errno);
  char settings[64];
  snprintf(settings, sizeof settings, "%s=%d %d %d", NSBOX_INIT_ENV, run->fds[FD_RUN], run->fds[FD_REPORT],
           (int)workload);
  char* const argv[] = {"nsbox-init", NULL};
  char* const envp[] = {settings, NULL};
  execve(NSBOX_INIT_PATH, argv, envp);
  int err = errno;
  kill(workload, SIGKILL);  // a run whose end nobody would report
  fail(run, "execve", NSBOX_INIT_PATH, err);
}

enum { PID1_STACK_SIZE = 128 * 1024, PID1_STACK_GUARD = 4096 };

/* What the clone hands PID 1: the run, and where its workload resumes (a
 * __builtin_setjmp buffer in nsbox_fork_run's frame, which the workload's
 * copy of the zygote's stack holds intact: the zygote was waiting). */
struct pid1_start {
  const struct nsbox_run* run;
  void* zygote_frame[5];
  /* Set by PID 1 while it is inside glibc's fork(), which locks the
   * zygote's malloc arenas and stdio list while other zygote threads may
   * run: a PID 1 killed there leaves them locked for good (see
   * nsbox_fork_run). */
  volatile int in_fork;
};

/* PID 1 of the run, just cloned: sets the run up, forks the workload and
 * becomes nsbox-init. The workload jumps back into nsbox_fork_run(). */
static int run_init(void* arg) {
  struct pid1_start* start = arg;
  const struct nsbox_run* run = start->run;
  /* What ps shows until the exec (the argv area is the zygote's). */
  prctl(PR_SET_NAME, "nsbox-init", 0, 0, 0);
  join_run_cgroup(run);
  /* A session of the run's own, as a started sandbox has: otherwise it
   * would share the fork server's process group (kill(0, ...) reaches
   * every member, in any pid namespace) with every run of the server. */
  if (setsid() < 0) fail(run, "setsid", "run session", errno);
  /* One /dev/null for the control socket's fd number and, at the exec,
   * PID 1's stdio: the zygote's, opened before the run's mounts (a
   * character device, nothing to walk from; the workload closes it). */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) fail(run, "open", "/dev/null", errno);
  forget_control_socket(run, null);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, NULL);  // the zygote ignores it; the run gets the default
  enter_run_namespaces(run);
  set_user_ns_quotas(run);
  build_mounts(run);
  bring_up_loopback(run);
  if (sethostname(run->hostname, strlen(run->hostname)) < 0) fail(run, "sethostname", run->hostname, errno);
  /* 'U': set up, its user namespace's quotas included. nsbox refuses the
   * 'I' of a rootfs older than them, whose runs would have none. */
  send_self(run, 'U');
  apply_rlimits(run);
  drop_privileges(run);
  /* The memory PID 1 shares (the zygote's, whose workloads make their own
   * copy dumpable again) is closed to the run before the workload exists. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  /* glibc's fork: the workload's glibc state (its cached thread id, locks)
   * is a freshly forked process's, as user code expects. Its prepare and
   * parent handlers run here on the zygote's memory, as if the zygote had
   * forked: the zygote's thread is the one waiting. */
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) < 0) fail(run, "pipe", "PID 1 gate", errno);
  start->in_fork = 1;
  pid_t workload = fork();
  if (workload != 0) start->in_fork = 0;
  if (workload < 0) fail(run, "fork", "workload", errno);
  if (workload == 0) {
    close(null);
    close(run->fds[FD_REPORT]);
    close(gate[1]);
    wait_for_nsbox_init(gate[0]);
    __builtin_longjmp(start->zygote_frame, 1);
  }
  close(gate[0]);
  if (fcntl(gate[1], F_SETFD, 0) < 0) fail(run, "fcntl", "PID 1 gate", errno);
  become_nsbox_init(run, null, workload);
  return SETUP_FAILED_EXIT;
}

/* PID 1's stack, made once per zygote and reused: PID 1s run one at a time,
 * each while the zygote waits. NULL when it cannot be made. */
static char* pid1_stack(void) {
  static char* stack;
  if (stack) return stack;
  char* area = mmap(NULL, PID1_STACK_SIZE + PID1_STACK_GUARD, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (area == MAP_FAILED) return NULL;
  if (mprotect(area, PID1_STACK_GUARD, PROT_NONE) < 0) {
    munmap(area, PID1_STACK_SIZE + PID1_STACK_GUARD);
    return NULL;
  }
  stack = area + PID1_STACK_GUARD;
  return stack;
}

/* In the zygote: clones the run's PID 1 into a new user and pid namespace
 * nested in the zygote's, sharing this memory until it execs (CLONE_VFORK
 * keeps this thread waiting until then). Returns PID 1's pid in the zygote,
 * 0 in the run's workload, -errno when the clone fails.
 *
 * PID 1 skips glibc's fork steps (no atfork handlers, no lock reset) and
 * runs only this file's code; the workload is forked by glibc's fork(). The
 * Python caller runs Python's own before- and after-fork steps around this
 * call, holding the GIL. */
long nsbox_fork_run(const struct nsbox_run* run) {
  char* stack = pid1_stack();
  if (!stack) return -ENOMEM;
  /* PID 1 makes the memory it shares not dumpable before the workload
   * exists; it needs it dumpable until then (its /proc/self/uid_map is
   * closed to it otherwise), so the zygote's own setting is put back. */
  int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  struct pid1_start start = {.run = run};
  if (__builtin_setjmp(start.zygote_frame)) return 0;  // the workload
  long pid =
      clone(run_init, stack + PID1_STACK_SIZE, CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | CLONE_NEWPID | SIGCHLD, &start);
  int err = errno;
  if (start.in_fork) {
    /* PID 1 was killed inside fork(): locks of this process's memory may
     * stay held. Ending here is what keeps the next runs safe; nsbox starts
     * a new fork server. */
    report_failure(run->fds[FD_ERROR], "fork server",
                   "the run's PID 1 died inside fork() while it shared the fork server's memory", EOWNERDEAD);
    _exit(SETUP_FAILED_EXIT);
  }
  if (dumpable >= 0) prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
  /* What this run's PID 1 left on the stack reaches no later run. */
  madvise(stack, PID1_STACK_SIZE, MADV_DONTNEED);
  return pid < 0 ? -err : pid;
}
