// Shared by every attack in attacks_js/: the two verdicts and small helpers.
// An attack's main(args) (sync or async) returns stopped(...) when the
// defence held and escaped(...) when it got through; args.params holds what
// the harness planted on the host (secret_path, secret, host_pid, host_port,
// abstract, marker). Each verdict also says whether this process is a run
// forked by the JavaScript fork server (require.main is then zygote.js), so
// the harness knows which kind of run stopped the attack.
const fs = require('fs');
const childProcess = require('child_process');

const NSBOX_FORKED = !!(require.main && /\/zygote\.js$/.test(require.main.filename || ''));
const FORKINIT = '/opt/nsbox/forkinit.node';

class Args {
  constructor(params) {
    this.params = params;
  }
}

function stopped(detail) {
  return { stopped: true, detail: String(detail).slice(0, 600), forked: NSBOX_FORKED };
}

function escaped(detail) {
  return { stopped: false, detail: String(detail).slice(0, 600), forked: NSBOX_FORKED };
}

// A system call's failure as Node reports it (e.code 'EACCES', 'EPERM', ...).
function isSystemError(e) {
  return !!e && typeof e.code === 'string' && /^E[A-Z0-9]+$/.test(e.code);
}

// fn() must fail with a system error; anything else is an escape.
function fails(what, fn) {
  let result;
  try {
    result = fn();
  } catch (e) {
    if (isSystemError(e)) return stopped(`${what}: ${e.code}`);
    return escaped(`${what} threw something other than a system error: ${e && e.stack ? e.stack : e}`);
  }
  return escaped(`${what} succeeded: ${JSON.stringify(result === undefined ? null : result)}`.slice(0, 300));
}

// The first failure of several checks, each a fails()-like verdict.
function allStopped(verdicts) {
  const bad = verdicts.find((v) => !v.stopped);
  return bad || stopped(verdicts.map((v) => v.detail).join('; '));
}

// True when path can be read and holds the host's secret.
function readsSecret(path, secret) {
  try {
    return fs.readFileSync(path).includes(secret);
  } catch (e) {
    return false;
  }
}

function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// A field of /proc/self/status ("Seccomp", "NoNewPrivs", "CapEff", ...).
function statusField(name, pid = 'self') {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(`^${name}:\\s*(.*)$`, 'm'));
  return m ? m[1].trim() : null;
}

// What the kernel says this process may do, and must not have gained.
function confinement() {
  return ['Seccomp', 'Seccomp_filters', 'NoNewPrivs', 'CapEff', 'CapPrm', 'CapBnd', 'Uid']
    .map((k) => `${k}=${statusField(k)}`)
    .join(' ');
}

// Whether the kernel still refuses what seccomp denies: a child python3
// calls unshare(CLONE_NEWUSER) and mount(2) through ctypes. Returns '' when
// both are refused, else what happened.
function deniedCallsStillDenied() {
  const code =
    'import ctypes\n' +
    'l = ctypes.CDLL(None, use_errno=True)\n' +
    'r1 = l.unshare(0x10000000); e1 = ctypes.get_errno()\n' +
    'r2 = l.mount(b"none", b"/tmp", b"tmpfs", 0, None); e2 = ctypes.get_errno()\n' +
    'print(r1, e1, r2, e2)\n';
  const r = childProcess.spawnSync('python3', ['-c', code], { encoding: 'utf8', timeout: 10000 });
  const out = (r.stdout || '').trim();
  return out === '-1 1 -1 1' ? '' : `unshare/mount from a child: ${out || r.error || r.stderr}`;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`${what}: no answer in ${ms} ms`), { code: 'ETIMEDOUT' })), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
