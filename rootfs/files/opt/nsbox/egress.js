'use strict';
// nsbox egress preload, loaded into every node process of a sandbox with
// egress (NODE_OPTIONS=--require=/opt/nsbox/egress.js).
//
// The sandbox's network namespace has only loopback: the one way out is the
// HTTP proxy announced in HTTP(S)_PROXY, which takes `CONNECT host:port`.
// Node 20 ignores proxy variables, so this makes the http/https modules and
// the global fetch (Node's bundled undici) tunnel through the proxy with
// CONNECT, honouring NO_PROXY. Without proxy variables it does nothing.
//
// Not covered (they connect directly, which in the sandbox fails with
// ECONNREFUSED or ENETUNREACH): raw net/tls sockets, http2, requests given
// their own `createConnection` (e.g. the ws package) and http Agents with
// their own createConnection (e.g. agentkeepalive's).

let net; // required by install(): without a proxy, loading this has no effect

const CONNECT_TIMEOUT_MS = 30000; // for the proxy's answer / a direct connect
const MAX_HEAD_BYTES = 16384; // a proxy response head larger than this is bogus
const MAX_BODY_BYTES = 4096; // of a refusal body, read for the error message
const MAX_REASON_CHARS = 500; // of that body, put in the error message

function warn(message) {
  process.stderr.write(`nsbox egress: ${message}\n`);
}

// "http://[user:pass@]host[:port]" (scheme optional) -> proxy, or null.
function parseProxy(name, value) {
  if (!value) return null;
  let url = null;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`);
  } catch (e) { /* reported below */ }
  if (!url || url.protocol !== 'http:' || !url.hostname) {
    warn(`ignoring ${name}: only http:// proxies are supported`);
    return null;
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = Number(url.port) || 80;
  const user = decodeURIComponent(url.username);
  const auth = user || url.password ?
    `Basic ${Buffer.from(`${user}:${decodeURIComponent(url.password)}`).toString('base64')}` : null;
  return { host, port, auth, label: hostPort(host, port) };
}

function hostPort(host, port) {
  return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

// NO_PROXY as curl reads it: `*`, host names matching themselves and their
// subdomains (a leading `.` or `*.` is ignored), IP literals, CIDR ranges,
// each optionally with `:port`.
function parseNoProxy(value) {
  const ips = new net.BlockList();
  const names = []; // { host, port } with port 0 for any
  let all = false;
  for (let entry of (value || '').toLowerCase().split(/[\s,]+/)) {
    if (!entry) continue;
    if (entry === '*') {
      all = true;
      continue;
    }
    let port = 0;
    const m = /^(\[[^\]]*\]|[^:]*):(\d+)$/.exec(entry);
    if (m) {
      entry = m[1];
      port = Number(m[2]);
    }
    entry = entry.replace(/^\[(.*)\]$/, '$1').replace(/^\*?\./, '').replace(/\.$/, '');
    const [addr, bits] = entry.split('/');
    const family = net.isIP(addr) === 6 ? 'ipv6' : 'ipv4';
    try {
      if (net.isIP(addr) && !port && bits !== undefined) ips.addSubnet(addr, Number(bits), family);
      else if (net.isIP(addr) && !port) ips.addAddress(addr, family);
      else if (entry) names.push({ host: entry, port });
    } catch (e) { /* a malformed entry matches nothing */ }
  }
  return function bypass(host, port) {
    if (all) return true;
    host = String(host).toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
    const ip = net.isIP(host);
    if (ip && ips.check(host, ip === 6 ? 'ipv6' : 'ipv4')) return true;
    return names.some((n) => (!n.port || n.port === port) &&
      (host === n.host || (!ip && host.endsWith(`.${n.host}`))));
  };
}

// Calls cb(err) or cb(null, socket) once, when `event` fires on the socket or
// it fails; bounded by CONNECT_TIMEOUT_MS. Leaves no listener behind.
function settle(socket, event, what, cb) {
  const done = (err) => {
    socket.setTimeout(0);
    socket.removeListener(event, onEvent);
    socket.removeListener('error', done);
    socket.removeListener('timeout', onTimeout);
    if (err) {
      socket.destroy();
      cb(err);
    } else {
      cb(null, socket);
    }
  };
  const onEvent = () => done(null);
  const onTimeout = () => done(Object.assign(
    new Error(`${what}: timed out after ${CONNECT_TIMEOUT_MS / 1000} s`), { code: 'ETIMEDOUT' }));
  socket.setTimeout(CONNECT_TIMEOUT_MS);
  socket.once(event, onEvent);
  socket.once('error', done);
  socket.once('timeout', onTimeout);
}

// Opens a TCP connection to the proxy and asks it to CONNECT to host:port.
// Calls cb(err) or cb(null, socket) once; the socket then carries raw bytes.
function tunnel(proxy, host, port, cb) {
  const target = hostPort(host, port);
  const socket = net.connect({ host: proxy.host, port: proxy.port });
  let head = null; // { status, reason, length } once the response head is in
  let buf = Buffer.alloc(0);
  let connected = false;
  let finished = false;

  const onConnect = () => { connected = true; };
  // An error about the proxy itself: "nsbox egress proxy 127.0.0.1:3128 <what>".
  const failure = (what, extra) =>
    Object.assign(new Error(`nsbox egress proxy ${proxy.label} ${what}`), extra);
  const finish = (err) => {
    if (finished) return;
    finished = true;
    socket.setTimeout(0);
    socket.removeListener('connect', onConnect);
    socket.removeListener('readable', onReadable);
    socket.removeListener('end', onEnd);
    socket.removeListener('close', onEnd);
    socket.removeListener('timeout', onTimeout);
    socket.removeListener('error', onError);
    if (err) {
      socket.destroy();
      cb(err);
    } else {
      cb(null, socket);
    }
  };
  // The proxy answered with an error: say why, with its explanation.
  const refuse = () => {
    let body = buf.toString('utf8').replace(/\s+/g, ' ').trim();
    if (body.length > MAX_REASON_CHARS) body = `${body.slice(0, MAX_REASON_CHARS)}...`;
    const verb = head.status === 403 ? 'refused' : 'failed to';
    const err = new Error(`nsbox egress proxy ${verb} CONNECT ${target}: ` +
      `${head.status} ${head.reason}${body ? `: ${body}` : ''}`);
    finish(Object.assign(err, { code: 'ERR_NSBOX_EGRESS_PROXY', statusCode: head.status }));
  };
  const onReadable = () => {
    let chunk;
    while (!finished && (chunk = socket.read()) !== null) {
      buf = Buffer.concat([buf, chunk]);
      if (!head) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) {
          if (buf.length > MAX_HEAD_BYTES) finish(failure(`sent a too large answer to CONNECT ${target}`));
          continue;
        }
        const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
        const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0]);
        if (!m) {
          finish(failure(`sent a malformed answer to CONNECT ${target}: ${lines[0].slice(0, 100)}`));
          break;
        }
        const cl = lines.find((l) => /^content-length:/i.test(l));
        const length = cl ? Number(cl.slice(15).trim()) : NaN;
        head = { status: Number(m[1]), reason: m[2], length };
        buf = buf.subarray(end + 4);
        if (head.status >= 200 && head.status < 300) {
          if (buf.length) socket.unshift(buf); // early bytes from the target
          finish(null);
          break;
        }
      }
      // Without Content-Length the body ends when the proxy closes (onEnd).
      if (buf.length >= Math.min(head.length, MAX_BODY_BYTES)) refuse();
    }
  };
  const onEnd = () => {
    if (head) refuse();
    else finish(failure(`closed the connection before answering CONNECT ${target}`));
  };
  const onTimeout = () => {
    if (head) refuse();
    else finish(failure(`did not answer CONNECT ${target} within ${CONNECT_TIMEOUT_MS / 1000} s`,
      { code: 'ETIMEDOUT' }));
  };
  const onError = (err) => {
    if (head) return refuse(); // an answer came, then a reset: report the answer
    const what = connected ? `failed during CONNECT ${target}` : 'unreachable';
    finish(failure(`${what}: ${err.message}`, { code: err.code, cause: err }));
  };

  socket.setTimeout(CONNECT_TIMEOUT_MS);
  socket.on('connect', onConnect);
  socket.on('readable', onReadable);
  socket.on('end', onEnd);
  socket.on('close', onEnd);
  socket.on('timeout', onTimeout);
  socket.on('error', onError);
  socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n` +
    `${proxy.auth ? `Proxy-Authorization: ${proxy.auth}\r\n` : ''}\r\n`);
}

function install() {
  const env = process.env;
  const rawHttp = env.http_proxy || env.HTTP_PROXY;
  const rawHttps = env.https_proxy || env.HTTPS_PROXY;
  if (!rawHttp && !rawHttps) return;
  net = require('net');

  const proxies = {
    'http:': parseProxy('HTTP_PROXY', rawHttp),
    'https:': parseProxy('HTTPS_PROXY', rawHttps),
  };
  const bypass = parseNoProxy(env.no_proxy || env.NO_PROXY);
  // The proxy to use for a target, or null to connect directly (also for the
  // proxy itself, which clients that speak proxy themselves talk to).
  const proxyFor = (protocol, host, port) => {
    const proxy = proxies[protocol];
    if (!proxy || bypass(host, port) || (host === proxy.host && port === proxy.port)) return null;
    return proxy;
  };

  patchAgents(proxyFor);
  patchFetch(proxyFor);
}

// http/https: every Agent (the global ones, `agent: false`, `new Agent()`)
// makes its sockets in Agent.prototype.createSocket. Where the agent uses
// Node's default createConnection, open the tunnel first and then let Node
// make the socket over it: https's createConnection runs tls.connect with
// the request's options (servername, rejectUnauthorized, ca, ...) plus
// `socket`; for http the createConnection below returns the tunnel itself.
// Agents with their own createConnection (agentkeepalive, proxy agents)
// are left alone.
function patchAgents(proxyFor) {
  const http = require('http');
  const https = require('https');
  const { Agent } = http;
  const nodeCreateSocket = Agent.prototype.createSocket;
  const plain = Agent.prototype.createConnection; // net.createConnection
  const secure = https.Agent.prototype.createConnection; // tls.connect + session cache
  const kTunnel = Symbol('nsbox egress tunnel');

  Agent.prototype.createConnection = function createConnection(options) {
    return options && options[kTunnel] ? options[kTunnel] : plain.apply(this, arguments);
  };
  const byDefault = Agent.prototype.createConnection;

  Agent.prototype.createSocket = function createSocket(req, options, cb) {
    const secureAgent = this.createConnection === secure;
    const opts = { ...options, ...this.options };
    const host = String(opts.host || 'localhost').replace(/^\[(.*)\]$/, '$1');
    const port = Number(opts.port) || this.defaultPort;
    const proxy = (secureAgent || this.createConnection === byDefault) && !opts.socketPath &&
      proxyFor(secureAgent ? 'https:' : 'http:', host, port);
    if (!proxy) return nodeCreateSocket.apply(this, arguments);

    tunnel(proxy, host, port, (err, socket) => {
      if (err) return cb(err);
      socket.setNoDelay(opts.noDelay !== false);
      if (this.keepAlive) socket.setKeepAlive(true, this.keepAliveMsecs);
      try {
        const withTunnel = secureAgent ? { ...options, socket } : { ...options, [kTunnel]: socket };
        nodeCreateSocket.call(this, req, withTunnel, cb);
      } catch (e) {
        socket.destroy();
        cb(e);
      }
    });
    return undefined;
  };
}

// fetch: install a bundled-undici Agent with a tunnelling connector as the
// global dispatcher. The npm undici package is not available, and Node 20
// does not export its Agent; but reading a lazy undici global (Headers) loads
// the bundled undici, which then creates its default Agent as the global
// dispatcher, whose constructor is the Agent class.
function patchFetch(proxyFor) {
  if (typeof globalThis.fetch !== 'function') return; // --no-experimental-fetch
  const key = Symbol.for('undici.globalDispatcher.1');
  void globalThis.Headers;
  const current = globalThis[key];
  const UndiciAgent = current && current.constructor;
  if (typeof UndiciAgent !== 'function' || UndiciAgent.name !== 'Agent' ||
      typeof current.dispatch !== 'function') {
    warn('cannot find the bundled undici Agent; fetch() will not use the proxy');
    return;
  }
  const tls = require('tls');

  // undici's connector contract: opts { protocol, hostname, port ('' for the
  // default), servername }; callback(err) or callback(null, connected socket).
  function connect(opts, callback) {
    const secure = opts.protocol === 'https:';
    const host = opts.hostname;
    const port = Number(opts.port) || (secure ? 443 : 80);
    const proxy = proxyFor(opts.protocol, host, port);
    const onTcp = (err, socket) => {
      if (err) return callback(err);
      socket.setNoDelay(true);
      socket.setKeepAlive(true, 60000);
      if (!secure) return callback(null, socket);
      const servername = opts.servername || (net.isIP(host) ? undefined : host);
      const tlsSocket = tls.connect({ socket, host, servername, ALPNProtocols: ['http/1.1'] });
      settle(tlsSocket, 'secureConnect', `TLS handshake with ${hostPort(host, port)}`, callback);
    };
    if (proxy) return tunnel(proxy, host, port, onTcp);
    const direct = net.connect({ host, port }); // a NO_PROXY host
    return settle(direct, 'connect', `connecting to ${hostPort(host, port)}`, onTcp);
  }

  try {
    globalThis[key] = new UndiciAgent({ connect });
  } catch (e) {
    warn(`cannot install a proxy dispatcher (${e.message}); fetch() will not use the proxy`);
  }
}

install();
