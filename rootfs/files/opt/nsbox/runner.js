'use strict';
// nsbox JavaScript runner: runs one agent code node and reports main()'s result.
//
// Protocol (docs/RUNNERS.md): the request {"code": string, "inputs": object}
// is read from fd 0 until EOF, then fd 0 is pointed at /dev/null. User output
// goes to fd 1/2 untouched. One JSON object {"return", "error", "error_type"}
// is written to fd 3 as soon as main's value is known; then user stdout/stderr
// are flushed, fd 3 is closed and the process exits 0 without waiting for
// user timers. Without a usable fd 3 the runner says so on stderr, exits 70.

const fs = require('fs');
const path = require('path');
const util = require('util');
const vm = require('vm');
const { createRequire } = require('module');

const RESULT_FD = 3;
const USER_FILE = '<user_code>'; // the file name in stacks, as the platform's
const REQUIRE_BASE = 'user_code.js'; // require() resolves as from cwd/user_code.js
const MISSING_MAIN = 'code must define a function main(args)';
const EX_SOFTWARE = 70;

// Captured now, before user code can patch them.
const stringify = JSON.stringify;
const parse = JSON.parse;
const { isNumberObject, isBigIntObject } = util.types;
const bigintValueOf = BigInt.prototype.valueOf;
const numberOf = Number;
const isFinite = Number.isFinite;
const isArray = Array.isArray;
const { writeSync, readSync, closeSync, fstatSync, openSync } = fs;
const exit = process.exit.bind(process);

let written = false; // a result went (or was attempted) to fd 3
let status = 0; // the exit status once the result is written

function resultFdOk() {
  // Without an inherited fd 3, libuv's epoll fd usually takes number 3:
  // accept only what a result channel can be.
  try {
    const st = fstatSync(RESULT_FD);
    return st.isFIFO() || st.isSocket() || st.isFile() || st.isCharacterDevice();
  } catch (e) {
    return false;
  }
}

function result(ret, error, errorType) {
  return stringify({ return: ret, error, error_type: errorType });
}

// Frames of the runner, of the fork server that called it (zygote.js) and
// of Node's internals are noise for the user.
const ZYGOTE_FILE = path.join(__dirname, 'zygote.js');
function filterStack(stack) {
  return stack
    .split('\n')
    .filter((line) => !(/^\s+at /.test(line) && (line.includes(__filename) || line.includes(ZYGOTE_FILE) ||
      /[( ]node:/.test(line) || line.includes('nsbox_resolve.js'))))
    .join('\n');
}

function formatError(e) {
  try {
    if (e !== null && typeof e === 'object' && typeof e.stack === 'string') return filterStack(e.stack);
    if (e instanceof Error) return `${e.name}: ${e.message}`;
    return `Uncaught ${util.inspect(e)}`; // a thrown non-Error value, as the REPL says it
  } catch (err) {
    return 'Uncaught exception (it could not be formatted)';
  }
}

// JSON.stringify's replacer, called for every value after its toJSON():
// BigInt -> "123n" (as the platform does); NaN and +-Infinity are refused
// (JSON.stringify would write null). Number and BigInt wrapper objects are
// unwrapped here as JSON.stringify would, so that they get the same checks.
function replacer(key, value) {
  if (typeof value === 'object' && value !== null) {
    if (isArray(value)) return value;
    if (isNumberObject(value)) value = numberOf(value);
    else if (isBigIntObject(value)) value = bigintValueOf.call(value);
    else return value;
  }
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' && !isFinite(value)) {
    throw new TypeError(`${value} is not JSON-serializable`);
  }
  return value;
}

function encodeReturn(value) {
  if (value === undefined) return result(null, null, null);
  if (typeof value === 'function' || typeof value === 'symbol') {
    return result(null, `TypeError: main returned a ${typeof value}, not JSON serializable`, 'serialization');
  }
  let text;
  try {
    text = stringify(value, replacer);
  } catch (e) {
    const msg = e instanceof Error ? `${e.name}: ${e.message}` : formatError(e);
    return result(null, msg, 'serialization');
  }
  // undefined when a toJSON() gave undefined: same as returning undefined.
  return `{"return":${text === undefined ? 'null' : text},"error":null,"error_type":null}`;
}

// The supervisor should hand over blocking pipes; a non-blocking one only
// costs a 1 ms sleep per EAGAIN here (Node has no synchronous poll).
function sleep1ms() {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
}

function readAll(fd) {
  const buf = Buffer.allocUnsafe(1 << 20);
  const chunks = [];
  for (;;) {
    let n;
    try {
      n = readSync(fd, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === 'EAGAIN') { sleep1ms(); continue; }
      throw e;
    }
    if (n === 0) return Buffer.concat(chunks);
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
}

function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      sleep1ms();
    }
  }
}

// Writes the result synchronously. Safe in an 'exit' listener.
function writeResult(text) {
  if (written) return false;
  written = true;
  try {
    writeAll(RESULT_FD, Buffer.from(text, 'utf8'));
  } catch (e) {
    process.stderr.write(`nsbox runner: cannot write the result to fd 3: ${e.message}\n`);
    status = EX_SOFTWARE;
  }
  return true;
}

// process.stdout/stderr are asynchronous for pipes: an empty write's
// callback runs once everything written before it has reached the kernel.
function flush(stream, next) {
  try {
    if (stream.destroyed || stream.writableEnded) return next();
    stream.write('', () => next());
  } catch (e) {
    next();
  }
}

function finish(text) {
  if (!writeResult(text)) return;
  flush(process.stdout, () => flush(process.stderr, () => {
    try { closeSync(RESULT_FD); } catch (e) { /* already closed by user code */ }
    exit(status); // do not wait for user timers or sockets
  }));
}

function readRequest() {
  let raw;
  try {
    raw = readAll(0);
  } catch (e) {
    throw new Error(`request: cannot read fd 0: ${e.message}`);
  } finally {
    // User code reading stdin must see EOF: Node has no dup2, but open()
    // returns the lowest free fd, which is 0 right after closing it.
    try { closeSync(0); } catch (e) { /* not open */ }
    try {
      const fd = openSync('/dev/null', 'r');
      if (fd !== 0) closeSync(fd);
    } catch (e) { /* fd 0 stays closed */ }
  }
  return parseRequest(raw);
}

function parseRequest(raw) {
  let req;
  try {
    req = parse(raw.toString('utf8'));
  } catch (e) {
    throw new Error(`request: invalid JSON: ${e.message}`);
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) {
    throw new Error('request: expected a JSON object');
  }
  if (typeof req.code !== 'string') throw new Error('request: "code" must be a string');
  const inputs = req.inputs === undefined || req.inputs === null ? {} : req.inputs;
  if (typeof inputs !== 'object' || Array.isArray(inputs)) {
    throw new Error('request: "inputs" must be an object');
  }
  return { code: req.code, inputs };
}

// Globals for user code, configurable so that a top-level `class Args`,
// `const require`, ... in user code is legal and wins.
function defineGlobals() {
  let cwd = '/tmp';
  try { cwd = process.cwd(); } catch (e) { /* cwd removed */ }
  const filename = path.join(cwd, REQUIRE_BASE);
  const userModule = { id: '.', filename, exports: {}, require: createRequire(filename) };
  const globals = {
    Args: class Args { constructor(params) { this.params = params; } },
    require: userModule.require,
    module: userModule,
    exports: userModule.exports,
    __filename: filename,
    __dirname: cwd,
  };
  for (const [name, value] of Object.entries(globals)) {
    Object.defineProperty(globalThis, name, { value, configurable: true, writable: true, enumerable: false });
  }
  return userModule;
}

async function run() {
  let req;
  try {
    req = readRequest();
  } catch (e) {
    return finish(result(null, e.message, 'contract'));
  }
  const userModule = defineGlobals();
  let script;
  try {
    script = new vm.Script(req.code, { filename: USER_FILE });
  } catch (e) {
    return finish(result(null, formatError(e), 'syntax'));
  }
  let value;
  try {
    script.runInThisContext({ displayErrors: false });
    // A separate script sees user top-level bindings: lexical ones (class,
    // let, const) shadow our global properties, functions replace them.
    let [Args, main] = vm.runInThisContext(
      '[typeof Args === "undefined" ? undefined : Args, typeof main === "undefined" ? undefined : main]',
      { filename: 'nsbox_resolve.js' });
    if (main === undefined && userModule.exports) main = userModule.exports.main;
    const contract = (msg) => finish(result(null, msg, 'contract'));
    const kind = (v) => (v === null ? 'null' : typeof v);
    if (main === undefined) return contract(MISSING_MAIN);
    if (typeof main !== 'function') return contract(`${MISSING_MAIN}; main is not a function (it is ${kind(main)})`);
    if (typeof Args !== 'function') return contract(`Args is not a class (it is ${kind(Args)})`);
    if (!constructible(Args)) return contract('Args is not a class (it is a function that cannot be called with new)');
    value = await main(new Args(req.inputs));
  } catch (e) {
    return finish(result(null, formatError(e), 'exception'));
  }
  return finish(encodeReturn(value));
}

// Whether `new f()` is allowed (arrow functions, methods and most built-in
// functions are not), found without calling f.
function constructible(f) {
  try {
    Reflect.construct(Object, [], f);
    return true;
  } catch {
    return false;
  }
}

// Runs the runner's own code once on a sample, without running any code
// and without touching fds 0-3 or the process's handlers: the fork server
// (zygote.js) calls it so that V8 compiles these functions there, and each
// forked run starts with their bytecode instead of compiling them again.
function warmUp() {
  const req = parseRequest(Buffer.from(stringify({
    code: 'function main(args) {\n  return { n: args.params.n * 2 };\n}\n', inputs: { n: 21, s: 'x', a: [1, 2.5, null] },
  })));
  new vm.Script(req.code, { filename: USER_FILE }); // compiled only: running it would define main here
  createRequire(path.join('/tmp', REQUIRE_BASE));
  encodeReturn({ n: 42, s: 'x', a: [1, 2.5, null, true], b: 1n, w: new Number(1) });
  encodeReturn(undefined);
  encodeReturn(Symbol('s'));
  encodeReturn({ bad: NaN });
  formatError(new TypeError('warm-up'));
  formatError('warm-up');
}

// Runs the request on fd 0. Started as `node runner.js`, this file calls
// it itself; the fork server (zygote.js) loads this file ahead of time and
// calls it in each forked run, once the run's fds are in place.
function main() {
  process.on('exit', (code) => {
    // User code called process.exit() before main's value was known.
    if (!written) {
      writeResult(result(null,
        `Error: the code called process.exit(${code}) before main returned a value`, 'exception'));
    }
    process.exitCode = status; // a written result means exit 0
  });
  process.on('beforeExit', () => {
    finish(result(null, "Error: main's promise never settled (the event loop became empty " +
      'before it resolved or rejected)', 'exception'));
  });
  process.on('uncaughtException', (e) => finish(result(null, formatError(e), 'exception')));
  process.on('unhandledRejection', (e) => finish(result(null, formatError(e), 'exception')));

  // Node makes process.stdout and process.stderr on first use, loading its
  // net, stream and tty code: about 5 ms here, paid by the run when the
  // runner's final flush is the first use. Made now, while a warm sandbox
  // still waits for its request. Making a pipe's stream turns its fd
  // non-blocking, so that fs.writeSync(1, ...) in user code would write only
  // what fits in the pipe: the fds are made blocking again (libuv's stream
  // copes; its writes then complete before returning).
  for (const stream of [process.stdout, process.stderr]) {
    if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
  }

  if (!resultFdOk()) {
    process.stderr.write('nsbox runner: fd 3 (the result channel) is not open; run this under nsbox ' +
      'or pass a pipe as fd 3 (see docs/RUNNERS.md)\n');
    written = true;
    status = EX_SOFTWARE;
    process.exitCode = EX_SOFTWARE;
  } else {
    run().catch((e) => {
      process.stderr.write(`nsbox runner: internal error: ${e && e.stack}\n`);
      status = EX_SOFTWARE;
      exit(EX_SOFTWARE);
    });
  }
}

module.exports = { main, warmUp };
if (require.main === module) main();
