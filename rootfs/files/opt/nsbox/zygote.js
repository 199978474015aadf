'use strict';
// nsbox JavaScript fork server (docs/ARCHITECTURE.md, "Fork server").
//
// Started as `node --single-threaded /opt/nsbox/zygote.js`, the workload of
// its own sandbox (user, mount, pid, net, ipc and uts namespaces and cgroup,
// no capabilities, no_new_privs, a seccomp filter), with the runner and the
// modules a run uses already loaded. It never runs user code itself. For
// each request on fd 3 it forks the run's PID 1 straight into fresh
// namespaces of its own, as zygote.py does for Python, through the same C
// code (rootfs/forkinit.c, here as the add-on /opt/nsbox/forkinit.node with
// rootfs/forknode.c):
//
//   zygote -> init (PID 1 of the run, forkinit.c): the run's cgroup, user,
//             mount, net, ipc, uts and cgroup namespaces, fresh /proc,
//             /tmp, /dev/shm, /dev/pts, workspace and profile tmpfs, lo up,
//             hostname, rlimits, no capability, no_new_privs, all while
//             sharing this process's memory (this thread waits, as after
//             vfork); forks the workload, then execs /opt/nsbox/nsbox-init,
//             which reaps;
//          -> workload (PID 2, forked by init, back in this file): stdio and
//             fd 3 from the request, cwd, env, the run's seccomp filter last,
//             then the runner, as `node /opt/nsbox/runner.js` would run it.
//
// The request is the one zygote.py reads: b"F" and the run's settings as
// JSON, with the fds [run socket, stdin, stdout, stderr, result, error,
// report]. Setup failures go to the error fd as nsbox's ChildFailure.
//
// What a forked run has of the zygote, and a started one does not, is in
// docs/SECURITY.md ("Fork server", "The JavaScript fork server"); what
// forkinit.node undoes in each run (random generators, fds the zygote's
// threads own) is listed there.

// V8 compiles a function when it first runs, and keeps the bytecode. Here,
// until serving starts, it compiles every function it loads at once
// instead: a forked run then finds compiled what the zygote loaded, rather
// than compiling it again in each run (its own code is compiled lazily, as
// in a started run: lazy is back on before the first run).
const v8 = require('v8');
v8.setFlagsFromString('--no-lazy');

const fs = require('fs');
const net = require('net');
const forkinit = require('/opt/nsbox/forkinit.node');
// V8 posts no work to the platform's worker threads from now on, which a
// forked run does not have: Node would wait for that work for ever once a
// run's loop emptied (forkplatform.cc). Done before the warm-up and the
// modules below load.
forkinit.platformWithoutWorkers();
// Node's code onto huge pages, before the modules below run much of it: a
// run then inherits it mapped instead of faulting it in (hugetext.c). Only
// a speed-up, so a failure leaves the code where it was and says so.
try {
  forkinit.codeOnHugePages();
} catch (e) {
  warn(e.message);
}
const runner = require('/opt/nsbox/runner.js');

const CONTROL_FD = 3;
const SETUP_FAILED_EXIT = 125; // kSetupFailedExit
const EIO = 5;
const EINVAL = 22;

const MS_RDONLY = 1, MS_NOSUID = 2, MS_NODEV = 4, MS_NOEXEC = 8, MS_BIND = 4096;
const NO_DEV_SUID = MS_NOSUID | MS_NODEV;
const MOUNT_REQUIRED = 0, MOUNT_OPTIONAL = 1, MOUNT_MASK_FILE = 2;
const FD_ERROR = 5;

// Loaded now so that a run does not pay for them: what the runner and
// process.stdout/stderr on a pipe load on first use, and the modules agents
// require. The streams themselves are made by each run, on its own fds.
for (const name of ['tty', 'stream', 'util', 'vm', 'path', 'crypto', 'lodash', 'dayjs']) require(name);

// What runs here once stays compiled (and has its inline caches) for every
// run forked later: the runner's own code, and what a run's process.stdout
// and stderr (pipes) run: a net.Socket on a pipe, made blocking, written
// to and closed. Calls done once the loop has finished with the socket.
function warmUp(done) {
  runner.warmUp();
  const [readEnd, writeEnd] = forkinit.pipe();
  const stream = new net.Socket({ fd: writeEnd, readable: false, writable: true });
  if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
  stream.on('close', () => {
    fs.closeSync(readEnd);
    done();
  });
  stream.write('', () => stream.destroy());
}

// The zygote's own diagnostics, on its stderr: written directly, as
// process.stderr made here would be every run's.
function warn(text) {
  try {
    fs.writeSync(2, `nsbox fork server: ${text}\n`);
  } catch (e) { /* nowhere to say it */ }
}

// nsbox's ChildFailure (include/nsbox/child_report.h): step[48],
// object[4000], int32 errno.
function reportFailure(fd, step, object, err) {
  const buf = Buffer.alloc(48 + 4000 + 4);
  buf.write(String(step).slice(0, 47), 0, 47, 'utf8');
  buf.write(String(object).slice(0, 3999), 48, 3999, 'utf8');
  buf.writeInt32LE(Number.isInteger(err) ? err : EIO, 4048);
  try {
    fs.writeSync(fd, buf);
  } catch (e) { /* nsbox is gone */ }
}

// What PID 1 does for this run, as forkinit.c reads it (zygote.py's
// _run_plan, the same mounts).
function runPlan(cfg, fds, uid, gid) {
  const mounts = [['proc', '/proc', 'proc', NO_DEV_SUID | MS_NOEXEC, null, MOUNT_REQUIRED]];
  for (const path of cfg.proc_mask_files) mounts.push(['/dev/null', path, null, MS_BIND, null, MOUNT_MASK_FILE]);
  for (const path of cfg.proc_mask_dirs) {
    mounts.push(['tmpfs', path, 'tmpfs', MS_RDONLY | NO_DEV_SUID | MS_NOEXEC, 'mode=0555,size=4k,nr_inodes=1',
      MOUNT_OPTIONAL]);
  }
  mounts.push(['devpts', '/dev/pts', 'devpts', MS_NOSUID | MS_NOEXEC, 'newinstance,ptmxmode=0666,mode=0620,max=16',
    MOUNT_REQUIRED]);
  for (const t of cfg.tmpfs) mounts.push(['tmpfs', t.target, 'tmpfs', t.flags, t.data, MOUNT_REQUIRED]);
  const ws = cfg.workspace;
  if (ws) {
    mounts.push(['tmpfs', ws.path, 'tmpfs', NO_DEV_SUID, `mode=0700,size=${ws.size},nr_inodes=${ws.inodes}`,
      MOUNT_REQUIRED]);
  }
  return {
    fds, controlFd: CONTROL_FD, uid, gid, mounts,
    workspaceOut: ws ? `${ws.path}/out` : null,
    hostname: cfg.hostname,
    rlimits: cfg.rlimits, // [resource, soft, hard], -1 for unlimited
    quotas: cfg.quotas, // [name, value]: the run's user namespace's (forkinit.c)
  };
}

// V8 hands WebAssembly's asynchronous compile and instantiate to its
// platform's worker threads, which a forked run does not have: the run
// would wait for them forever. Here they compile on the run's own thread,
// and still answer with a promise (rejected with the same errors).
function compileWasmOnThisThread() {
  const { Module, Instance } = WebAssembly;
  async function bytesOf(source) {
    const response = await source;
    if (!(response instanceof Response)) throw new TypeError('WebAssembly: argument must be a Response or a Promise of one');
    const type = response.headers.get('content-type');
    if (!type || type.split(';')[0].trim().toLowerCase() !== 'application/wasm') {
      throw new TypeError(`WebAssembly: Response has unsupported MIME type '${type}', expected 'application/wasm'`);
    }
    if (!response.ok) throw new TypeError(`WebAssembly: HTTP status code is not ok (${response.status})`);
    return response.arrayBuffer();
  }
  function instantiateModule(module, imports) {
    return { module, instance: new Instance(module, imports) };
  }
  const replacements = {
    async compile(source) {
      return new Module(source);
    },
    async instantiate(source, imports) {
      if (source instanceof Module) return new Instance(source, imports);
      return instantiateModule(new Module(source), imports);
    },
    async compileStreaming(source) {
      return new Module(await bytesOf(source));
    },
    async instantiateStreaming(source, imports) {
      return instantiateModule(new Module(await bytesOf(source)), imports);
    },
  };
  for (const [name, value] of Object.entries(replacements)) {
    Object.defineProperty(WebAssembly, name, { value, writable: true, configurable: true, enumerable: false });
  }
}

// In the workload, just forked by the run's PID 1: becomes the runner.
function becomeWorkload(cfg, fds) {
  const program = Buffer.from(cfg.seccomp, 'hex');
  // Buffer.from stops at the first character that is not hex: a partial
  // filter must not load.
  if (program.length * 2 !== cfg.seccomp.length) {
    throw Object.assign(new Error('the seccomp program is not hex'), { step: 'seccomp', object: 'request',
      errno: EINVAL });
  }
  // true, or it threw: set-up must not go on past a failed step.
  if (forkinit.becomeWorkload(fds, cfg.cwd, ['node', '/opt/nsbox/runner.js'], program, cfg.notify) !== true) {
    throw Object.assign(new Error('becomeWorkload did not finish'), { step: 'workload', object: 'set-up',
      errno: EIO });
  }
  for (const key of Object.keys(process.env)) delete process.env[key];
  for (const [key, value] of cfg.env) process.env[key] = value;
  process.argv = [process.execPath, '/opt/nsbox/runner.js'];
  process.execArgv = [];
  compileWasmOnThisThread();
  // Node's exit joins threads only the zygote has: a run ends at once.
  process.reallyExit = (code) => forkinit.exit(code | 0);
  // At end of file on the error fd, nsbox knows set-up is over.
  fs.closeSync(fds[FD_ERROR]);
}

// Serves requests until one comes back as a workload: returns what it needs.
function serve() {
  forkinit.ignoreChildren();
  // nsbox_fork_run() clones only this thread: the others must hold nothing
  // a run needs. With --single-threaded, V8 gives its platform's workers
  // no work; they and libuv's idle threads wait on condition variables.
  if (!process.execArgv.includes('--single-threaded')) {
    warn('node must run with --single-threaded; refusing to serve');
    return SETUP_FAILED_EXIT;
  }
  const uid = process.getuid(), gid = process.getgid(); // what each run's user namespace maps
  forkinit.recordZygoteFds(); // what each run replaces of the zygote's
  // A profile's runs send the same settings each time (only the fds
  // differ): parsed once (zygote.py says why).
  let lastText = null, cfg, plan;
  for (;;) {
    const request = forkinit.receive(CONTROL_FD);
    if (request === null) {
      // Every sender is gone (the profile was retired), but runs this
      // process forked may still be running in its pid namespace, which
      // ends with it: nsbox ends it once they are done.
      for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
    }
    if (!request.ok) {
      warn('malformed request dropped');
      continue;
    }
    const fds = request.fds;
    try {
      if (request.text === lastText) {
        plan.fds = fds;
      } else {
        lastText = null; // until cfg and plan are both this request's
        cfg = JSON.parse(request.text);
        plan = runPlan(cfg, fds, uid, gid);
        lastText = request.text;
      }
    } catch (e) { // nsbox sent what this file does not read: fail the run, keep serving
      reportFailure(fds[FD_ERROR], 'fork server', `request: ${e}`, EINVAL);
      for (const fd of fds) fs.closeSync(fd);
      continue;
    }
    let pid = -1;
    try {
      pid = forkinit.forkRun(plan);
    } catch (e) {
      if (e.workload) return { cfg, fds, error: e };
      reportFailure(fds[FD_ERROR], e.step || 'clone', e.object || 'run namespaces', e.errno);
    }
    if (pid === 0) return { cfg, fds };
    for (const fd of fds) fs.closeSync(fd);
  }
}

// Serves from a callback of the event loop, once the warm-up is done: a
// run's workload returns here, and then into the loop, which runs the
// runner's asynchronous work.
function start() {
  const served = serve();
  if (typeof served === 'number') {
    process.exitCode = served;
    return;
  }
  const { cfg, fds } = served;
  try {
    if (served.error) throw served.error;
    becomeWorkload(cfg, fds);
  } catch (e) {
    reportFailure(fds[FD_ERROR], e.step || 'workload', e.step ? e.object : String(e), e.errno || EIO);
    forkinit.exit(SETUP_FAILED_EXIT);
  }
  runner.main();
}

warmUp(() => {
  v8.setFlagsFromString('--lazy');
  setImmediate(start);
});
