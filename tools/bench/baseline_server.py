#!/usr/bin/python3
"""The no-isolation baseline that tools/bench-server --baseline measures.

A model of the platform's current code servers, which #8 asks nsbox to
beat: one HTTP server that forks itself for each request and runs the code
in that child with no isolation at all (no namespaces, no cgroup, no
seccomp). Python code runs in the forked child itself, in the interpreter
that the server already started; JavaScript code runs in a `node` process
that the child starts for it. It answers POST /run with the same body as
nsbox's compatibility API ({"return": ..., "error": ...}), one request per
connection, as the node does.

It exists for side-by-side figures only: it runs what it is sent with the
rights of the user that starts it, so bench-server starts it as nobody
(65534) and on 127.0.0.1.

Usage: baseline_server.py PORT NODE_BINARY
"""
import asyncio
import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import traceback

# Read from stdin by the node child: the code, then main(new Args(inputs)).
NODE_RUNNER = r"""
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', async () => {
  const req = JSON.parse(input);
  let answer;
  try {
    const run = new Function(req.code + '\nreturn main(new Args(arguments[0]));');
    answer = { return: await run(req.inputs), error: null };
  } catch (e) {
    answer = { return: null, error: String(e && e.stack || e) };
  }
  process.stdout.write(JSON.stringify(answer));
});
"""


def expire(*_):
    raise TimeoutError("timeout")


def run_python(code, inputs):
    """Runs the agent contract in this (forked) process: Args(inputs), main(args)."""
    scope = {"__name__": "__main__"}
    try:
        exec(compile(code, "<code>", "exec"), scope)
        result = scope["main"](scope["Args"](inputs))
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return {"return": result, "error": None}
    except Exception:  # the user's error is the answer, as on the platform
        return {"return": None, "error": traceback.format_exc()}


def run_javascript(node, code, inputs, timeout):
    """Starts one node process for the request, as a spawn-per-request server does."""
    done = subprocess.run([node, "-e", NODE_RUNNER], input=json.dumps({"code": code, "inputs": inputs}),
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        return {"return": None, "error": done.stderr.strip() or f"node exited with {done.returncode}"}
    return json.loads(done.stdout)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path != "/health":
            return self.answer(404, {"error": "not found"})
        return self.answer(200, {"status": "ok"})

    def do_POST(self):  # noqa: N802 (http.server's naming)
        if self.path != "/run":
            return self.answer(404, {"error": "not found"})
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            language, code, inputs = req.get("language", "python"), req["code"], req.get("inputs", {})
            timeout = float(req.get("timeout", 30))
        except (ValueError, KeyError, TypeError) as e:
            return self.answer(400, {"return": None, "error": f"bad request: {e}"})
        if language == "python":
            signal.signal(signal.SIGALRM, expire)  # the forked child is the run
            signal.alarm(max(1, int(timeout)))
            return self.answer(200, run_python(code, inputs))
        if language == "javascript":
            try:
                return self.answer(200, run_javascript(self.server.node, code, inputs, timeout))
            except subprocess.TimeoutExpired:
                return self.answer(200, {"return": None, "error": "timeout"})
        return self.answer(400, {"return": None, "error": f"unknown language {language!r}"})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")  # one request per connection, as nsbox's node
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass  # no per-request log line: the benchmark measures the runs


class Server(socketserver.ForkingMixIn, http.server.HTTPServer):
    """Forks for each connection; with one request per connection, each request."""
    allow_reuse_address = True
    request_queue_size = 128  # as bench-server's node queue_depth
    max_children = 512  # the load is bounded by wrk's connections (at most 64)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: baseline_server.py PORT NODE_BINARY")
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    server.node = sys.argv[2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
