/* nsbox fork server: the run's PID 1, in C (docs/ARCHITECTURE.md, "Fork
 * server").
 *
 * zygote.py loads this library (forkinit.so) and zygote.js the same code as
 * a Node add-on (forkinit.node, with forknode.c); each calls nsbox_fork_run()
 * for each request. It clones the run's PID 1 into a new user and pid
 * namespace; PID 1 sets the run up here, then fork()s the workload, which
 * returns 0 from nsbox_fork_run() into the zygote's code and becomes the
 * runner.
 *
 * Why C: PID 1 lives as long as the run. As Python it ran the interpreter
 * for its set-up and its wait loop, and every object it touched (reference
 * counts, allocations) copied a page of the fork server's heap: about a
 * quarter of a forked run's CPU went there. This code touches its stack and
 * little else, so PID 1 shares nearly all its memory with the fork server
 * and the workload is forked from a clean copy.
 *
 * Built by tools/build-rootfs into /opt/nsbox/forkinit.so with the host's
 * compiler and glibc headers; the host and the tree are the same Debian
 * release, so the tree's glibc has every symbol it uses (checked there).
 * Failures go to the error fd as nsbox's ChildFailure, PID 1's report of the
 * workload's end as InitReport (include/nsbox/child_report.h). */
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
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkinit.h"

/* nsbox's ChildFailure. */
struct child_failure {
  char step[48];
  char object[4000];
  int32_t err;
};

struct init_report {
  int32_t kind; /* 1 exited, 2 signaled */
  int32_t value;
  int32_t alone;
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
static struct msghdr one_byte_message(char* byte, struct iovec* iov, union message_control* control,
                                      size_t fd_count) {
  memset(control, 0, sizeof *control);
  iov->iov_base = byte;
  iov->iov_len = 1;
  struct msghdr msg = {.msg_iov = iov,
                       .msg_iovlen = 1,
                       .msg_control = control->bytes,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * fd_count)};
  return msg;
}

/* Sends one byte of tag and a pidfd of this process: nsbox learns the pid
 * from the credentials and holds the pidfd, which a reused pid cannot fool. */
static void send_self(const struct nsbox_run* run, char tag) {
  int me = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (me < 0) fail(run, "pidfd_open", "run init", errno);
  union message_control control;
  struct iovec iov;
  struct msghdr msg = one_byte_message(&tag, &iov, &control, 1);
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &me, sizeof me);
  if (sendmsg(run->fds[FD_RUN], &msg, MSG_NOSIGNAL) != 1) fail(run, "sendmsg", "run socket", errno);
  close(me);
}

/* Gets this process into the run's cgroup. Until then the memory it
 * touches stays charged to the fork server's cgroup, so it does nothing
 * else first. nsbox answers 'c' once it has moved this process (cgroup v2),
 * or 'j' with the run's tasks files, opened by nsbox (v1): this process
 * joins by writing "0" to each, as moving oneself takes no global lock on
 * this kernel, unlike a move by pid. nsbox checks the result. */
static void join_run_cgroup(const struct nsbox_run* run) {
  send_self(run, 'P');
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

/* PID 1 of a started run is nsbox-init, and shows nothing else. */
static void name_process(void) {
  static const char name[] = "nsbox-init";
  nsbox_set_cmdline(name, sizeof name);
  prctl(PR_SET_NAME, name, 0, 0, 0);
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

/* Reaps every exited child; 1 and the workload's wait status once it is
 * one of them. PID 1 that has no child left never saw the workload end. */
static int reap_exited(pid_t workload, int* status) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG | __WALL);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) _exit(SETUP_FAILED_EXIT);
    if (pid == 0) return 0;
    if (pid == workload) {
      *status = st;
      return 1;
    }
  }
}

/* nsbox's InitReport, then PID 1 exits: the kernel ends whatever is left of
 * the run. alone: no other process was left when the workload ended. */
static void report_workload_end(int status, int report_fd) {
  int alone = 1;
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG | __WALL);
    if (pid < 0 && errno == EINTR) continue;
    if (pid == 0) alone = 0;
    if (pid <= 0) break;
  }
  struct init_report report = {.alone = alone};
  if (WIFSIGNALED(status)) {
    report.kind = 2;
    report.value = WTERMSIG(status);
  } else {
    report.kind = 1;
    report.value = WEXITSTATUS(status);
  }
  ssize_t ignored = write(report_fd, &report, sizeof report);
  (void)ignored;
  _exit(report.kind == 1 ? report.value : 128 + report.value);
}

/* Reaps every child until the workload ends, then reports it. The run
 * socket stays open on nsbox's side for the whole run: its end means nsbox
 * is gone, and PID 1 exits, which ends every process of the run (a started
 * run's PID 1 dies with the supervisor the same way, PR_SET_PDEATHSIG). */
static void reap_until_workload_ends(const struct nsbox_run* run, pid_t workload) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) _exit(SETUP_FAILED_EXIT);
  int status = 0;
  while (!reap_exited(workload, &status)) {
    struct pollfd ready[2] = {{.fd = run->fds[FD_RUN], .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    if (poll(ready, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(SETUP_FAILED_EXIT);
    }
    if (ready[0].revents) {
      char byte;
      ssize_t n = recv(run->fds[FD_RUN], &byte, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) _exit(SETUP_FAILED_EXIT);
    }
    if (ready[1].revents) {
      struct signalfd_siginfo info[8];
      while (read(sfd, info, sizeof info) > 0) {
      }
    }
  }
  report_workload_end(status, run->fds[FD_REPORT]);
}

/* The zygote's control socket carries every run's request: the run must
 * not hold it. Its fd number stays taken (by /dev/null) until the workload
 * puts the result fd there: fork handlers that run in the workload (libuv's
 * make a pipe) would otherwise get it, and lose it to that dup2. */
static void forget_control_socket(const struct nsbox_run* run) {
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) fail(run, "open", "/dev/null", errno);
  if (dup3(null, run->control_fd, O_CLOEXEC) < 0) fail(run, "dup3", "control socket", errno);
  close(null);
}

/* PID 1 of the run, just cloned: sets the run up and forks the workload.
 * Returns 0 in the workload only. */
static long run_init(const struct nsbox_run* run) {
  join_run_cgroup(run);
  forget_control_socket(run);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, NULL);  // the zygote ignores it; the run gets the default
  enter_run_namespaces(run);
  name_process();
  build_mounts(run);
  bring_up_loopback(run);
  if (sethostname(run->hostname, strlen(run->hostname)) < 0) fail(run, "sethostname", run->hostname, errno);
  send_self(run, 'I');
  apply_rlimits(run);
  drop_privileges(run);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  /* glibc's fork: the workload's glibc state (its cached thread id, locks)
   * is a freshly forked process's, as user code expects. */
  pid_t workload = fork();
  if (workload < 0) fail(run, "fork", "workload", errno);
  if (workload == 0) {
    close(run->fds[FD_REPORT]);
    return 0;
  }
  for (int i = FD_STDIN; i <= FD_ERROR; ++i) close(run->fds[i]);
  /* Nothing of the fork server's stays open here (its stdout and stderr). */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    close(null);
  }
  reap_until_workload_ends(run, workload);
  _exit(SETUP_FAILED_EXIT);
}

/* In the zygote: clones the run's PID 1 into a new user and pid namespace
 * nested in the zygote's. Returns PID 1's pid in the zygote, 0 in the run's
 * workload, -errno when the clone fails.
 *
 * The raw clone skips glibc's fork steps (no atfork handlers, no lock
 * reset, a stale cached thread id): sound only in a single-threaded
 * process, which zygote.py checks. PID 1 runs only this file's code, and
 * the workload is forked by glibc's fork(). The caller runs Python's own
 * before- and after-fork steps around this call, holding the GIL. */
long nsbox_fork_run(const struct nsbox_run* run) {
  long pid = syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
  if (pid < 0) return -errno;
  if (pid > 0) return pid;
  return run_init(run);
}
