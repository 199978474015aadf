/* nsbox fork server for Node: the add-on zygote.js loads (docs/ARCHITECTURE.md,
 * "Fork server").
 *
 * Built by tools/build-rootfs together with forkinit.c into
 * /opt/nsbox/forkinit.node, against the Node-API headers of the very Node
 * tarball the recipe pins. Node has no call to receive fds, fork, load a
 * seccomp filter or dup2, so zygote.js asks this file; the run's PID 1 is
 * forkinit.c's, as for Python.
 *
 * Two things make a Node process forkable, both done here:
 * - V8 marks its heap MADV_DONTFORK (so that child_process.spawn copies
 *   little): a plain fork() gives a child without a heap, which crashes.
 *   nsbox_allow_fork_of_anonymous_mappings() (forkmaps.c) undoes that
 *   before each run is cloned.
 * - Only the forking thread lives on in a child. The zygote runs with V8's
 *   --single-threaded, so V8 hands no task to the platform's worker
 *   threads, which a run does not have (its jobs would: below); libuv's loop is made anew in the
 *   run (uv_loop_fork) and its thread pool, started by a run's first use,
 *   is the run's own. Node's exit path joins the missing threads, so a run
 *   ends with exit() below (_exit), after the runner has flushed its
 *   output; zygote.js routes process.exit() there.
 * A third, in forkplatform.cc: Node's platform would count the zygote's
 * worker threads, and V8 jobs would post work for them that nothing in a
 * run does: the zygote counts none from its start (platformWithoutWorkers),
 * and each workload checks it (a run fails otherwise).
 * And two things make it safe: OpenSSL (crypto.randomBytes, randomUUID)
 * notices a fork by a change of pid, and a run's workload has the pid the
 * zygote has in its own sandbox (2); V8's generators (Math.random, where it
 * maps memory) never notice. Each run reseeds both from the kernel before
 * any of its code runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <node_api.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include "forkinit.h"

/* forkplatform.cc: Node's platform counts no worker threads. */
int nsbox_platform_without_workers(void);
int nsbox_platform_counts_no_workers(void);
long nsbox_code_on_huge_pages(void); /* hugetext.c */

enum { MAX_REQUEST = 1 << 20, MAX_TEXT = 4096, MAX_ZYGOTE_PIPES = 64 };

/* The pipes the zygote's threads own (recordZygoteFds()): a run's copies of
 * them are closed. */
static struct {
  dev_t dev;
  ino_t ino;
} zygote_pipes[MAX_ZYGOTE_PIPES];
static int zygote_pipe_count;

/* An Error whose message names the step, the object and errno, and that
 * carries them as .step, .object and .errno (zygote.js reports them to nsbox
 * as a ChildFailure). */
static napi_value failure(napi_env env, const char* step, const char* object, int err) {
  char text[MAX_TEXT + 128];
  snprintf(text, sizeof text, "%s %s: %s", step, object, strerror(err));
  napi_value message, error, value;
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_create_string_utf8(env, step, NAPI_AUTO_LENGTH, &value);
  napi_set_named_property(env, error, "step", value);
  napi_create_string_utf8(env, object, NAPI_AUTO_LENGTH, &value);
  napi_set_named_property(env, error, "object", value);
  napi_create_int32(env, err, &value);
  napi_set_named_property(env, error, "errno", value);
  return error;
}

/* Throws failure(...); returns NULL, as a callback that threw does. */
static napi_value throw_failure(napi_env env, const char* step, const char* object, int err) {
  napi_throw(env, failure(env, step, object, err));
  return NULL;
}

/* Throws failure(...) marked .workload: it happened in a run's workload,
 * after the fork, not in the zygote. */
static napi_value throw_workload_failure(napi_env env, const char* step, const char* object, int err) {
  napi_value error = failure(env, step, object, err), yes;
  napi_get_boolean(env, true, &yes);
  napi_set_named_property(env, error, "workload", yes);
  napi_throw(env, error);
  return NULL;
}

/* The callback's arguments; throws a TypeError when fewer than want came. */
static int get_args(napi_env env, napi_callback_info info, size_t want, napi_value* argv) {
  size_t argc = want;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < want) {
    napi_throw_type_error(env, NULL, "forkinit.node: too few arguments");
    return 0;
  }
  return 1;
}

static int get_int64(napi_env env, napi_value v, int64_t* out) {
  if (napi_get_value_int64(env, v, out) == napi_ok) return 1;
  napi_throw_type_error(env, NULL, "forkinit.node: expected a number");
  return 0;
}

static int get_int(napi_env env, napi_value object, const char* name, int64_t* out) {
  napi_value v;
  return napi_get_named_property(env, object, name, &v) == napi_ok && get_int64(env, v, out);
}

/* A copy of a string value (NULL for null or undefined), malloc'd. */
static int get_string(napi_env env, napi_value v, char** out) {
  napi_valuetype type;
  *out = NULL;
  if (napi_typeof(env, v, &type) != napi_ok) return 0;
  if (type == napi_null || type == napi_undefined) return 1;
  size_t len = 0;
  if (type != napi_string || napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "forkinit.node: expected a string");
    return 0;
  }
  *out = malloc(len + 1);
  if (!*out) return 0;
  napi_get_value_string_utf8(env, v, *out, len + 1, &len);
  return 1;
}

static int get_element(napi_env env, napi_value array, uint32_t i, napi_value* out) {
  return napi_get_element(env, array, i, out) == napi_ok;
}

static int get_length(napi_env env, napi_value array, uint32_t* out) {
  if (napi_get_array_length(env, array, out) == napi_ok) return 1;
  napi_throw_type_error(env, NULL, "forkinit.node: expected an array");
  return 0;
}

/* receive(fd): the next request on the control socket. null once every
 * sender is gone; {ok: false} for a message that is not a request (its fds
 * closed); else {ok: true, text: the JSON after 'F', fds: [7 fds]}. */
static napi_value receive(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t fd;
  if (!get_args(env, info, 1, argv) || !get_int64(env, argv[0], &fd)) return NULL;
  static char buf[MAX_REQUEST];
  union {
    char bytes[CMSG_SPACE(sizeof(int) * FD_COUNT)];
    struct cmsghdr align;
  } control;
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes};
  ssize_t n;
  do n = recvmsg((int)fd, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return throw_failure(env, "recvmsg", "control socket", errno);
  napi_value result, value;
  if (n == 0) {
    napi_get_null(env, &result);
    return result;
  }
  int fds[FD_COUNT];
  size_t count = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t here = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < here; ++i) {
      int one;
      memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof one);
      if (count < FD_COUNT)
        fds[count++] = one;
      else
        close(one);
    }
  }
  int ok = buf[0] == 'F' && count == FD_COUNT && !(msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC));
  napi_create_object(env, &result);
  napi_get_boolean(env, ok, &value);
  napi_set_named_property(env, result, "ok", value);
  if (!ok) {
    for (size_t i = 0; i < count; ++i) close(fds[i]);
    return result;
  }
  napi_create_string_utf8(env, buf + 1, (size_t)n - 1, &value);
  napi_set_named_property(env, result, "text", value);
  napi_create_array_with_length(env, FD_COUNT, &value);
  for (uint32_t i = 0; i < FD_COUNT; ++i) {
    napi_value one;
    napi_create_int32(env, fds[i], &one);
    napi_set_element(env, value, i, one);
  }
  napi_set_named_property(env, result, "fds", value);
  return result;
}

/* In the workload: fresh entropy for OpenSSL's generators (the primary and
 * this thread's two), which are byte for byte the zygote's. Prediction
 * resistance makes each draw from the kernel; the additional input is
 * more of the same. */
static int reseed_openssl(void) {
  unsigned char fresh[32];
  if (getrandom(fresh, sizeof fresh, 0) != (ssize_t)sizeof fresh) return -1;
  EVP_RAND_CTX* generators[3] = {RAND_get0_primary(NULL), RAND_get0_public(NULL), RAND_get0_private(NULL)};
  for (int i = 0; i < 3; ++i)
    if (!generators[i] || EVP_RAND_reseed(generators[i], 1, NULL, 0, fresh, sizeof fresh) != 1) return -1;
  return 0;
}

/* V8 functions the pinned node binary exports (C++ names, Itanium ABI: a
 * member function takes its object first). A node without them fails to
 * load this add-on, which tools/build-rootfs checks. */
void* _ZN2v87Isolate10GetCurrentEv(void);
void* _ZN2v88internal7Isolate23random_number_generatorEv(void* isolate);
void _ZN2v84base21RandomNumberGenerator7SetSeedEl(void* generator, int64_t seed);
void _ZN2v84base2OS17SetRandomMmapSeedEl(int64_t seed);

/* In the workload: V8's random generators are byte for byte the zygote's.
 * The isolate's seeds Math.random in every realm (the main one, vm
 * contexts; lodash keeps its own reference to Math.random) on first use,
 * which the zygote never made; the other places V8 maps new memory. Both
 * get seeds from the kernel. */
static int reseed_v8(void) {
  int64_t seeds[2];
  if (getrandom(seeds, sizeof seeds, 0) != (ssize_t)sizeof seeds) return -1;
  void* isolate = _ZN2v87Isolate10GetCurrentEv();
  void* generator = isolate ? _ZN2v88internal7Isolate23random_number_generatorEv(isolate) : NULL;
  if (!generator) return errno = EINVAL, -1;
  _ZN2v84base21RandomNumberGenerator7SetSeedEl(generator, seeds[0]);
  _ZN2v84base2OS17SetRandomMmapSeedEl(seeds[1]);
  return 0;
}

/* The parts of a run plan that live in malloc'd memory. */
struct plan_memory {
  struct nsbox_mount* mounts;
  uint32_t mount_count;
  struct nsbox_rlimit* rlimits;
  struct nsbox_quota* quotas;
  uint32_t quota_count;
  char* workspace_out;
  char* hostname;
};

static void free_plan(struct plan_memory* m) {
  for (uint32_t i = 0; m->mounts && i < m->mount_count; ++i) {
    free((char*)m->mounts[i].source);
    free((char*)m->mounts[i].target);
    free((char*)m->mounts[i].fstype);
    free((char*)m->mounts[i].data);
  }
  free(m->mounts);
  free(m->rlimits);
  for (uint32_t i = 0; m->quotas && i < m->quota_count; ++i) free((char*)m->quotas[i].name);
  free(m->quotas);
  free(m->workspace_out);
  free(m->hostname);
}

/* One mount: [source, target, fstype, flags, data, kind]. */
static int read_mount(napi_env env, napi_value entry, struct nsbox_mount* m) {
  napi_value v;
  /* Each string goes into *m as soon as it is read: free_plan frees it. */
  char** strings[4] = {(char**)&m->source, (char**)&m->target, (char**)&m->fstype, (char**)&m->data};
  static const uint32_t string_at[4] = {0, 1, 2, 4};
  for (int i = 0; i < 4; ++i)
    if (!get_element(env, entry, string_at[i], &v) || !get_string(env, v, strings[i])) return 0;
  int64_t flags, kind;
  if (!get_element(env, entry, 3, &v) || !get_int64(env, v, &flags)) return 0;
  if (!get_element(env, entry, 5, &v) || !get_int64(env, v, &kind)) return 0;
  if (!m->target) {
    napi_throw_type_error(env, NULL, "forkinit.node: a mount has no target");
    return 0;
  }
  m->flags = (unsigned long)flags;
  m->kind = (int)kind;
  return 1;
}

/* One rlimit: [resource, soft, hard]; -1 is RLIM_INFINITY. */
static int read_rlimit(napi_env env, napi_value entry, struct nsbox_rlimit* r) {
  napi_value v;
  int64_t value[3];
  for (uint32_t i = 0; i < 3; ++i)
    if (!get_element(env, entry, i, &v) || !get_int64(env, v, &value[i])) return 0;
  r->resource = (int)value[0];
  r->soft = (unsigned long long)value[1];
  r->hard = (unsigned long long)value[2];
  return 1;
}

/* One quota of the run's user namespace: [name, value]. */
static int read_quota(napi_env env, napi_value entry, struct nsbox_quota* q) {
  napi_value v;
  int64_t value;
  if (!get_element(env, entry, 0, &v) || !get_string(env, v, (char**)&q->name)) return 0;
  if (!get_element(env, entry, 1, &v) || !get_int64(env, v, &value)) return 0;
  if (!q->name || value < 0) {
    napi_throw_type_error(env, NULL, "forkinit.node: a quota needs a name and a value of 0 or more");
    return 0;
  }
  q->value = (unsigned long long)value;
  return 1;
}

/* The run plan zygote.js built (its runPlan()) as forkinit.c reads it. */
static int read_plan(napi_env env, napi_value plan, struct nsbox_run* run, struct plan_memory* m) {
  napi_value v, entry;
  uint32_t count;
  int64_t n;
  if (napi_get_named_property(env, plan, "fds", &v) != napi_ok || !get_length(env, v, &count)) return 0;
  if (count != FD_COUNT) {
    napi_throw_type_error(env, NULL, "forkinit.node: a run plan needs 7 fds");
    return 0;
  }
  for (uint32_t i = 0; i < FD_COUNT; ++i) {
    if (!get_element(env, v, i, &entry) || !get_int64(env, entry, &n)) return 0;
    run->fds[i] = (int)n;
  }
  if (!get_int(env, plan, "controlFd", &n)) return 0;
  run->control_fd = (int)n;
  if (!get_int(env, plan, "uid", &n)) return 0;
  run->uid = (unsigned)n;
  if (!get_int(env, plan, "gid", &n)) return 0;
  run->gid = (unsigned)n;
  if (napi_get_named_property(env, plan, "mounts", &v) != napi_ok || !get_length(env, v, &count)) return 0;
  m->mounts = calloc(count ? count : 1, sizeof *m->mounts);
  if (!m->mounts) return 0;
  for (uint32_t i = 0; i < count; ++i) {
    m->mount_count = i + 1;
    if (!get_element(env, v, i, &entry) || !read_mount(env, entry, &m->mounts[i])) return 0;
  }
  run->mounts = m->mounts;
  run->mount_count = (int)count;
  if (napi_get_named_property(env, plan, "rlimits", &v) != napi_ok || !get_length(env, v, &count)) return 0;
  m->rlimits = calloc(count ? count : 1, sizeof *m->rlimits);
  if (!m->rlimits) return 0;
  for (uint32_t i = 0; i < count; ++i)
    if (!get_element(env, v, i, &entry) || !read_rlimit(env, entry, &m->rlimits[i])) return 0;
  run->rlimits = m->rlimits;
  run->rlimit_count = (int)count;
  if (napi_get_named_property(env, plan, "quotas", &v) != napi_ok || !get_length(env, v, &count)) return 0;
  m->quotas = calloc(count ? count : 1, sizeof *m->quotas);
  if (!m->quotas) return 0;
  for (uint32_t i = 0; i < count; ++i) {
    m->quota_count = i + 1;
    if (!get_element(env, v, i, &entry) || !read_quota(env, entry, &m->quotas[i])) return 0;
  }
  run->quotas = m->quotas;
  run->quota_count = (int)count;
  if (napi_get_named_property(env, plan, "workspaceOut", &v) != napi_ok || !get_string(env, v, &m->workspace_out))
    return 0;
  run->workspace_out = m->workspace_out;
  if (napi_get_named_property(env, plan, "hostname", &v) != napi_ok || !get_string(env, v, &m->hostname)) return 0;
  if (!m->hostname) {
    napi_throw_type_error(env, NULL, "forkinit.node: a run plan needs a hostname");
    return 0;
  }
  run->hostname = m->hostname;
  return 1;
}

/* forkRun(plan): clones the run's PID 1 (forkinit.c), which sets the run up
 * sharing this memory (this thread waits until it execs nsbox-init) and
 * forks the workload. Returns PID 1's pid in the zygote and 0 in the
 * workload, whose libuv loop and OpenSSL state are then its own; throws
 * with .workload set when making them fails there. */
static napi_value fork_run(napi_env env, napi_callback_info info) {
  napi_value argv[1], result;
  if (!get_args(env, info, 1, argv)) return NULL;
  uv_loop_t* loop = NULL;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || !loop)
    return throw_failure(env, "fork server", "libuv loop", EINVAL);
  struct nsbox_run run;
  struct plan_memory memory;
  memset(&run, 0, sizeof run);
  memset(&memory, 0, sizeof memory);
  if (!read_plan(env, argv[0], &run, &memory)) {
    free_plan(&memory);
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    return pending ? NULL : throw_failure(env, "fork server", "run plan", ENOMEM);
  }
  struct nsbox_failed_step failed;
  if (nsbox_allow_fork_of_anonymous_mappings(&failed) < 0) {
    int err = errno;
    free_plan(&memory);
    return throw_failure(env, failed.step, failed.object, err);
  }
  long pid = nsbox_fork_run(&run);
  free_plan(&memory);
  if (pid < 0) return throw_failure(env, "clone", "run namespaces", (int)-pid);
  if (pid == 0) {
    int err = uv_loop_fork(loop);
    if (err < 0) return throw_workload_failure(env, "uv_loop_fork", "workload", -err);
    if (reseed_openssl() < 0) return throw_workload_failure(env, "reseed", "OpenSSL random generators", EIO);
    if (reseed_v8() < 0) return throw_workload_failure(env, "reseed", "V8 random generators", errno);
    if (!nsbox_platform_counts_no_workers())
      return throw_workload_failure(env, "fork server", "Node's platform counts worker threads", EINVAL);
  }
  napi_create_int64(env, pid, &result);
  return result;
}

static int send_fd(int sock, char tag, int fd) {
  union {
    char bytes[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct iovec iov = {.iov_base = &tag, .iov_len = 1};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes};
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == 1 ? 0 : -1;
}

/* Offers fd by its number: nsbox takes it with pidfd_getfd (fd_passing.h),
 * or answers 'S' and it is sent. Sent outright, it could be refused
 * (ETOOMANYREFS) while another run of this host user holds more descriptors
 * in flight than this process's RLIMIT_NOFILE. 0, or -1 with errno. */
static int offer_fd(int sock, char tag, int fd) {
  struct __attribute__((packed)) {
    char tag;
    int32_t fd;
  } offer = {tag, fd};
  /* sendmsg, and read(): what an allow list with a listener names. */
  struct iovec iov = {.iov_base = &offer, .iov_len = sizeof offer};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof offer) return -1;
  char answer = 0;
  do n = read(sock, &answer, 1);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  if (n == 0) return errno = EPIPE, -1;
  if (answer == 'T') return 0;
  if (answer == 'S') return send_fd(sock, tag, fd);
  return errno = EPROTO, -1;
}

/* The run's filter, stacked on the zygote's, loaded last. With notify, its
 * listener goes to nsbox on the run socket (nsbox answers EPERM to denied
 * calls and counts them). */
static int load_seccomp(napi_env env, napi_value program, bool notify, int run_socket) {
  void* data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, program, &data, &len) != napi_ok || len == 0 || len % sizeof(struct sock_filter) ||
      len / sizeof(struct sock_filter) > BPF_MAXINSNS) {
    napi_throw_type_error(env, NULL,
                          "forkinit.node: the seccomp program must be a Buffer of 1 to 4096 BPF instructions");
    return 0;
  }
  struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)), .filter = data};
  long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
  if (fd < 0) return throw_failure(env, "seccomp", "load filter", errno), 0;
  if (!notify) return 1;
  if (offer_fd(run_socket, 'L', (int)fd) < 0) return throw_failure(env, "sendmsg", "seccomp listener", errno), 0;
  close((int)fd);
  return 1;
}

/* Calls what(fd, type, arg) for each open fd above 3 but the directory's
 * own; type is the /proc/self/fd link target. Stops at the first callback
 * that returns -1. -1 with errno when listing fails. */
static int for_each_fd(int (*what)(int fd, const char* type, void* arg), void* arg) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int result = 0;
  errno = 0;
  for (struct dirent* e; result == 0 && (e = readdir(dir));) {
    int fd = atoi(e->d_name);
    if (fd <= 3 || fd == dirfd(dir)) continue;
    char path[64], type[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, type, sizeof type - 1);
    if (n < 0) {
      result = -1;
      break;
    }
    type[n] = 0;
    result = what(fd, type, arg);
    errno = 0;
  }
  int err = errno;
  closedir(dir);
  errno = err;
  return result < 0 || err ? -1 : 0;
}

static int record_pipe(int fd, const char* type, void* arg) {
  (void)arg;
  struct stat st;
  if (strncmp(type, "pipe:", 5) != 0) return 0;
  if (fstat(fd, &st) < 0) return -1;
  if (zygote_pipe_count == MAX_ZYGOTE_PIPES) return errno = EMFILE, -1;
  zygote_pipes[zygote_pipe_count].dev = st.st_dev;
  zygote_pipes[zygote_pipe_count].ino = st.st_ino;
  ++zygote_pipe_count;
  return 0;
}

/* recordZygoteFds(): in the zygote, once before it serves: the pipes its
 * threads own (libuv loops of Node's helper threads, and the main loop's). */
static napi_value record_zygote_fds(napi_env env, napi_callback_info info) {
  (void)info;
  zygote_pipe_count = 0;
  if (for_each_fd(record_pipe, NULL) < 0) return throw_failure(env, "list", "/proc/self/fd", errno);
  return NULL;
}

/* What becomes of a fd of the workload that the zygote also has. */
enum shared_kind { SHARED_EPOLL, SHARED_EVENTFD, SHARED_PIPE, SHARED_DEV_NULL };

struct shared_fd {
  int fd;
  enum shared_kind kind;
  ino_t pipe;
};

struct shared_fds {
  const uv_loop_t* loop;
  int own[2]; /* the request's fds still open: the run socket, the error fd */
  struct shared_fd fd[MAX_ZYGOTE_PIPES * 2];
  int count;
  int refused; /* a fd of a kind this file does not know, or -1 */
  char refused_type[128];
};

static int is_own_fd(const struct shared_fds* found, int fd) {
  const uv_loop_t* loop = found->loop;
  return fd == found->own[0] || fd == found->own[1] || fd == uv_backend_fd(loop) || fd == loop->async_io_watcher.fd ||
         fd == loop->async_wfd || fd == loop->signal_pipefd[0] || fd == loop->signal_pipefd[1];
}

static int is_zygote_pipe(int fd, ino_t* ino) {
  struct stat st;
  if (fstat(fd, &st) < 0) return -1;
  *ino = st.st_ino;
  for (int i = 0; i < zygote_pipe_count; ++i)
    if (zygote_pipes[i].dev == st.st_dev && zygote_pipes[i].ino == st.st_ino) return 1;
  return 0;
}

static int find_shared_fd(int fd, const char* type, void* arg) {
  struct shared_fds* found = arg;
  if (is_own_fd(found, fd)) return 0;
  if (found->count == MAX_ZYGOTE_PIPES * 2) return errno = EMFILE, -1;
  struct shared_fd* f = &found->fd[found->count];
  f->fd = fd;
  if (!strcmp(type, "anon_inode:[eventpoll]")) {
    f->kind = SHARED_EPOLL;
  } else if (!strcmp(type, "anon_inode:[eventfd]")) {
    f->kind = SHARED_EVENTFD;
  } else if (!strcmp(type, "/dev/null")) {
    f->kind = SHARED_DEV_NULL;
  } else if (!strncmp(type, "pipe:", 5)) {
    int zygotes = is_zygote_pipe(fd, &f->pipe);
    if (zygotes < 0) return -1;
    if (!zygotes) return 0; /* made in this process since the fork (libuv's signal lock) */
    f->kind = SHARED_PIPE;
  } else {
    found->refused = fd;
    snprintf(found->refused_type, sizeof found->refused_type, "%s", type);
    return errno = EBADFD, -1;
  }
  ++found->count;
  return 0;
}

/* Puts fresh at fd's number, with fd's O_NONBLOCK, and closes fresh. */
static int put_in_place(int fresh, int fd) {
  int flags = fcntl(fd, F_GETFL);
  int ok = fresh >= 0 && flags >= 0 && dup3(fresh, fd, O_CLOEXEC) >= 0 &&
           fcntl(fd, F_SETFL, (fcntl(fd, F_GETFL) & ~O_NONBLOCK) | (flags & O_NONBLOCK)) >= 0;
  int err = errno;
  if (fresh >= 0) close(fresh);
  errno = err;
  return ok ? 0 : -1;
}

/* Both ends of the zygote's pipe f, wherever they are, become the ends of
 * one new pipe. */
static int replace_pipe(struct shared_fds* found, int i) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) < 0) return -1;
  int result = 0;
  for (int j = i; j < found->count && result == 0; ++j) {
    struct shared_fd* end = &found->fd[j];
    if (end->fd < 0 || end->kind != SHARED_PIPE || end->pipe != found->fd[i].pipe) continue;
    int mode = fcntl(end->fd, F_GETFL);
    result = mode < 0 ? -1 : put_in_place(dup(ends[(mode & O_ACCMODE) == O_RDONLY ? 0 : 1]), end->fd);
    if (j != i) end->fd = -1;
  }
  int err = errno;
  close(ends[0]);
  close(ends[1]);
  errno = err;
  return result;
}

static int replace_one(struct shared_fds* found, int i) {
  struct shared_fd* f = &found->fd[i];
  switch (f->kind) {
    case SHARED_EPOLL:
      return put_in_place(epoll_create1(EPOLL_CLOEXEC), f->fd);
    case SHARED_EVENTFD:
      return put_in_place(eventfd(0, EFD_CLOEXEC), f->fd);
    case SHARED_DEV_NULL: {
      int mode = fcntl(f->fd, F_GETFL);
      return mode < 0 ? -1 : put_in_place(open("/dev/null", (mode & O_ACCMODE) | O_CLOEXEC), f->fd);
    }
    case SHARED_PIPE:
      return replace_pipe(found, i);
  }
  return errno = EINVAL, -1;
}

/* In the workload: the zygote's helper threads are gone, but their libuv
 * loops' fds (epoll sets, eventfds, pipes) are still shared with the
 * zygote. A run could add to the zygote's epoll sets (its threads would
 * then spin on the run's events) or wake them. Each is replaced, under the
 * same number, by a fresh object of its own kind that nothing waits on:
 * code of this process that still uses the number (a task posted for a
 * thread that is gone) writes to it harmlessly. Kept: fds 0-3, the run's
 * own loop (new since uv_loop_fork), pipes made since the fork, and own_fds.
 * Any other fd fails the run (fail closed): it would be shared. */
static napi_value replace_shared_fds(napi_env env, const uv_loop_t* loop, const int own_fds[2]) {
  struct shared_fds found = {.loop = loop, .own = {own_fds[0], own_fds[1]}, .count = 0, .refused = -1};
  if (for_each_fd(find_shared_fd, &found) < 0) {
    if (found.refused < 0) return throw_failure(env, "list", "/proc/self/fd", errno);
    char what[192];
    snprintf(what, sizeof what, "fd %d (%s) shared with the fork server", found.refused, found.refused_type);
    return throw_failure(env, "replace", what, EBADFD);
  }
  for (int i = 0; i < found.count; ++i)
    if (found.fd[i].fd >= 0 && replace_one(&found, i) < 0)
      return throw_failure(env, "replace", "fds shared with the fork server", errno);
  return NULL;
}

/* The command line a started run's workload shows, NULs between args. */
static int set_cmdline_from(napi_env env, napi_value args) {
  char text[MAX_TEXT];
  size_t used = 0;
  uint32_t count;
  if (!get_length(env, args, &count)) return 0;
  for (uint32_t i = 0; i < count; ++i) {
    napi_value v;
    size_t len = 0;
    if (!get_element(env, args, i, &v) ||
        napi_get_value_string_utf8(env, v, text + used, sizeof text - used, &len) != napi_ok)
      return 0;
    used += len + 1; /* past the NUL napi wrote */
    if (used >= sizeof text) break;
  }
  nsbox_set_cmdline(text, used < sizeof text ? used : sizeof text);
  return 1;
}

/* The steps of becomeWorkload(); true once all are done. */
static napi_value become_workload_steps(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  if (!get_args(env, info, 5, argv)) return NULL;
  int fds[FD_COUNT];
  for (uint32_t i = 0; i < FD_COUNT; ++i) {
    napi_value v;
    int64_t n;
    if (!get_element(env, argv[0], i, &v) || !get_int64(env, v, &n)) return NULL;
    fds[i] = (int)n;
  }
  char* cwd = NULL;
  if (!get_string(env, argv[1], &cwd)) return NULL;
  bool notify = false;
  if (napi_get_value_bool(env, argv[4], &notify) != napi_ok) return free(cwd), NULL;
  static const int stdio[3] = {FD_STDIN, FD_STDOUT, FD_STDERR};
  for (int i = 0; i < 3; ++i)
    if (dup2(fds[stdio[i]], i) < 0) return free(cwd), throw_failure(env, "dup2", "stdio", errno);
  if (!cwd || chdir(cwd) < 0) {
    int err = cwd ? errno : EINVAL;
    napi_value thrown = throw_failure(env, "chdir", cwd ? cwd : "(none)", err);
    free(cwd);
    return thrown;
  }
  free(cwd);
  if (dup2(fds[FD_RESULT], 3) < 0) return throw_failure(env, "dup2", "result fd", errno);
  for (int i = FD_STDIN; i <= FD_RESULT; ++i) close(fds[i]);
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  if (!set_cmdline_from(env, argv[2])) return NULL;
  prctl(PR_SET_NAME, "node", 0, 0, 0);
  uv_loop_t* loop = NULL;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || !loop)
    return throw_failure(env, "fork server", "libuv loop", EINVAL);
  const int own[2] = {fds[FD_RUN], fds[FD_ERROR]};
  replace_shared_fds(env, loop, own);
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) != napi_ok || pending) return NULL;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (!load_seccomp(env, argv[3], notify, fds[FD_RUN])) return NULL;
  close(fds[FD_RUN]);
  napi_value done;
  napi_get_boolean(env, true, &done);
  return done;
}

/* becomeWorkload(fds, cwd, cmdline, seccompProgram, notify): in the
 * workload, just forked: the run's stdio and result fd (3), its cwd, what
 * ps shows, every fd it shares with the zygote's threads replaced, no
 * blocked signal, and the run's seccomp filter last. Closes every fd of the
 * request but the error fd, which zygote.js closes once set-up is over.
 * Returns true; anything else is a failure, and throws (fail closed: the
 * run must not go on without a step). */
static napi_value become_workload(napi_env env, napi_callback_info info) {
  napi_value done = become_workload_steps(env, info);
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (done && !pending) return done;
  if (!pending) throw_failure(env, "workload", "set-up", EINVAL);
  return NULL;
}

/* exit(code): ends the process at once (_exit): Node's own exit path would
 * join the platform's threads, which a forked run does not have. */
static napi_value exit_now(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t code = 70;
  if (get_args(env, info, 1, argv)) get_int64(env, argv[0], &code);
  _exit((int)code);
}

/* fillRandom(buffer): fills it from the kernel (getrandom), for the run's
 * own Math.random seed: V8's generator state is the zygote's. */
static napi_value fill_random(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  void* data = NULL;
  size_t len = 0;
  if (!get_args(env, info, 1, argv)) return NULL;
  if (napi_get_buffer_info(env, argv[0], &data, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "forkinit.node: expected a Buffer");
    return NULL;
  }
  for (size_t done = 0; done < len;) {
    ssize_t n = getrandom((char*)data + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return throw_failure(env, "getrandom", "Math.random seed", errno);
    done += (size_t)n;
  }
  return NULL;
}

/* pipe(): [read end, write end], close-on-exec, for the zygote's warm-up. */
static napi_value make_pipe(napi_env env, napi_callback_info info) {
  (void)info;
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) < 0) return throw_failure(env, "pipe2", "warm-up", errno);
  napi_value result, one;
  napi_create_array_with_length(env, 2, &result);
  for (uint32_t i = 0; i < 2; ++i) {
    napi_create_int32(env, ends[i], &one);
    napi_set_element(env, result, i, one);
  }
  return result;
}

/* platformWithoutWorkers(): called by zygote.js at its start; from then on
 * V8 posts no work to the platform's worker threads (forkplatform.cc). */
static napi_value platform_without_workers(napi_env env, napi_callback_info info) {
  (void)info;
  errno = EINVAL;
  if (nsbox_platform_without_workers() < 0)
    return throw_failure(env, "fork server", "Node's platform (its worker threads)", errno);
  return NULL;
}

/* codeOnHugePages(): called by zygote.js at its start; the bytes of node's
 * code now on transparent huge pages (hugetext.c), 0 when the kernel gave
 * none. */
static napi_value code_on_huge_pages(napi_env env, napi_callback_info info) {
  (void)info;
  long moved = nsbox_code_on_huge_pages();
  if (moved < 0) return throw_failure(env, "fork server", "node's code on huge pages", errno);
  napi_value result;
  napi_create_int64(env, moved, &result);
  return result;
}

/* ignoreChildren(): in the zygote, its children (the runs' PID 1) are
 * reaped by the kernel: their runs are nsbox's to supervise. */
static napi_value ignore_children(napi_env env, napi_callback_info info) {
  (void)info;
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  if (sigaction(SIGCHLD, &ign, NULL) < 0) return throw_failure(env, "sigaction", "SIGCHLD", errno);
  return NULL;
}

napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  static const struct {
    const char* name;
    napi_callback call;
  } functions[] = {{"receive", receive},
                   {"forkRun", fork_run},
                   {"becomeWorkload", become_workload},
                   {"codeOnHugePages", code_on_huge_pages},
                   {"exit", exit_now},
                   {"fillRandom", fill_random},
                   {"ignoreChildren", ignore_children},
                   {"pipe", make_pipe},
                   {"platformWithoutWorkers", platform_without_workers},
                   {"recordZygoteFds", record_zygote_fds}};
  for (size_t i = 0; i < sizeof functions / sizeof functions[0]; ++i) {
    napi_value f;
    napi_create_function(env, functions[i].name, NAPI_AUTO_LENGTH, functions[i].call, NULL, &f);
    napi_set_named_property(env, exports, functions[i].name, f);
  }
  return exports;
}
