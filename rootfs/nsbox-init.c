/* nsbox fork server: what a forked run's PID 1 becomes once the run is set
 * up (docs/ARCHITECTURE.md, "Fork server").
 *
 * forkinit.c's PID 1 shares the fork server's memory while it sets the run
 * up (the fork server waits, as after vfork), forks the workload, then
 * execs this program: from here on PID 1 holds nothing of the fork server,
 * and no page-table copy of it has to be made or torn down. It reaps every
 * process of the run until the workload ends, reports that end (nsbox's
 * InitReport, include/nsbox/child_report.h) and exits, which ends whatever
 * is left of the run.
 *
 * The environment holds its one setting, NSBOX_INIT="RUN_FD REPORT_FD
 * WORKLOAD_PID". Built static by tools/build-rootfs into
 * /opt/nsbox/nsbox-init.
 *
 * The exec makes PID 1 dumpable: the first thing this program does is to
 * undo that, and only then it closes the fds it does not need, among them
 * the gate the workload waits on before it goes on (forkinit.c), so no code
 * of the run ever meets a PID 1 it could open through /proc. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkinit.h"

struct init_report {
  int32_t kind; /* 1 exited, 2 signaled */
  int32_t value;
  int32_t alone;
};

struct settings {
  int run_fd;
  int report_fd;
  pid_t workload;
};

/* Parses one decimal number of NSBOX_INIT; NULL when there is none. */
static const char* parse_number(const char* text, long* value) {
  char* end = NULL;
  errno = 0;
  *value = strtol(text, &end, 10);
  if (errno || end == text || *value < 0 || *value > INT_MAX) return NULL;
  return end;
}

static int read_settings(struct settings* s) {
  const char* text = getenv(NSBOX_INIT_ENV);
  long values[3];
  for (int i = 0; i < 3; ++i)
    if (!text || !(text = parse_number(text, &values[i]))) return -1;
  if (*text || values[0] < 3 || values[1] < 3 || values[0] == values[1] || values[2] < 2) return -1;
  s->run_fd = (int)values[0];
  s->report_fd = (int)values[1];
  s->workload = (pid_t)values[2];
  return 0;
}

/* Every fd but stdio (/dev/null) and the two this process needs: the fork
 * server's own that were not close-on-exec, and the workload's gate. */
static void close_other_fds(const struct settings* s) {
  unsigned low = (unsigned)(s->run_fd < s->report_fd ? s->run_fd : s->report_fd);
  unsigned high = (unsigned)(s->run_fd < s->report_fd ? s->report_fd : s->run_fd);
  if (low > 3) close_range(3, low - 1, 0);
  if (high > low + 1) close_range(low + 1, high - 1, 0);
  close_range(high + 1, ~0U, 0);
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
 * run's PID 1 dies with the supervisor the same way, PR_SET_PDEATHSIG).
 * Every signal is blocked (since before the workload was forked). */
static void reap_until_workload_ends(const struct settings* s) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) _exit(SETUP_FAILED_EXIT);
  int status = 0;
  while (!reap_exited(s->workload, &status)) {
    /* The hang-up only: nothing on the socket is read here. The workload
     * shares this end of it and reads nsbox's answer to its listener's
     * offer (fd_passing.h), which a read here could take from it. */
    struct pollfd ready[2] = {{.fd = s->run_fd, .events = 0}, {.fd = sfd, .events = POLLIN}};
    if (poll(ready, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(SETUP_FAILED_EXIT);
    }
    if (ready[0].revents & (POLLHUP | POLLERR | POLLNVAL)) _exit(SETUP_FAILED_EXIT);
    if (ready[1].revents) {
      struct signalfd_siginfo info[8];
      while (read(sfd, info, sizeof info) > 0) {
      }
    }
  }
  report_workload_end(status, s->report_fd);
}

int main(void) {
  /* Before anything else: the workload waits for the gate's close below. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) return SETUP_FAILED_EXIT;
  struct settings s;
  if (read_settings(&s) < 0) return SETUP_FAILED_EXIT;
  close_other_fds(&s);
  reap_until_workload_ends(&s);
  return SETUP_FAILED_EXIT;
}
