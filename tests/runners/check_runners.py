#!/usr/bin/env python3
"""Dev harness for the nsbox runners (rootfs/files/opt/nsbox/runner.{py,js}).

Runs every case of tests/runners/cases.json through a runner the way the
supervisor does (request on fd 0, user output on fd 1/2, result on fd 3) and
checks the expectations. Standard library only.

  tests/runners/check_runners.py --host    # host python3/node, repo scripts
  tests/runners/check_runners.py --bwrap   # inside bwrap on the nsbox rootfs
  tests/runners/check_runners.py --host --bwrap -k unicode -v

Prints one line per case and a final "N passed, M failed" line; exits 1 on
any failure. Cases marked "needs_supervisor" (timeouts, OOM, ...) are left
to the nsbox supervisor tests and not run here.

Case fields (see docs/RUNNERS.md): name, language ("python"|"javascript"),
code, inputs, optional generators code_repeat {head?, text, count} (code =
head + text*count + code), inputs_repeat {key, text, count} and inputs_nest
{key, depth} (lists nested depth deep), raw_request
(sent as is instead of the JSON request), no_fd3 (start without fd 3), and
"expected": return | return_length | return_depth, error (exact) | error_contains
(str or list), error_not_contains, error_type, stdout | stdout_contains |
stdout_length, stderr | stderr_contains, exit_code (default 0), no_result,
max_seconds. needs_libs: uses numpy/requests/lodash/dayjs; --host borrows them
from the rootfs (PYTHONPATH, NODE_PATH) and skips such cases without one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER_DIR = os.path.join(REPO, "rootfs", "files", "opt", "nsbox")
CASES = os.path.join(REPO, "tests", "runners", "cases.json")
ROOTFS = os.environ.get("NSBOX_TEST_ROOTFS", "/var/lib/nsbox/rootfs/default")
TIMEOUT = 60
MISSING = object()


def runner_cmd(mode, language):
    interp, script = ("python3", "runner.py") if language == "python" else ("node", "runner.js")
    if mode == "host":
        return [interp, os.path.join(RUNNER_DIR, script)]
    return [
        "bwrap", "--ro-bind", ROOTFS, "/", "--ro-bind", RUNNER_DIR, "/opt/nsbox",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all",
        "--uid", "65534", "--gid", "65534", "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--chdir", "/tmp", interp, "/opt/nsbox/" + script,
    ]


def have_rootfs():
    return os.path.isdir(os.path.join(ROOTFS, "usr"))


def nested_list(depth):
    """[[...[]...]]: `depth` lists, one in the other."""
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def list_depth(value):
    """How many lists are nested in `value` (0 for anything else)."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


def build_request(case):
    if "raw_request" in case:
        return case["raw_request"].encode("utf-8")
    code = case["code"]
    rep = case.get("code_repeat")
    if rep:
        code = rep.get("head", "") + rep["text"] * rep["count"] + code
    inputs = dict(case.get("inputs", {}))
    rep = case.get("inputs_repeat")
    if rep:
        inputs[rep["key"]] = rep["text"] * rep["count"]
    nest = case.get("inputs_nest")
    if nest:
        inputs[nest["key"]] = nested_list(nest["depth"])
    # Lone surrogates in a case must travel as \udXXX escapes.
    return json.dumps({"code": code, "inputs": inputs}, ensure_ascii=False).encode("utf-8", "backslashreplace")


def run_case(mode, case, workdir):
    """Runs one case; returns (exit_code, stdout, stderr, fd3 bytes, seconds)."""
    request = build_request(case)
    cmd = runner_cmd(mode, case["language"])
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": workdir}
    if mode == "host" and have_rootfs():
        # The host has no numpy/requests/lodash/dayjs: borrow the rootfs's.
        env["PYTHONPATH"] = os.path.join(ROOTFS, "usr/lib/python3/dist-packages")
        env["NODE_PATH"] = os.path.join(ROOTFS, "usr/local/lib/node_modules")
    if case.get("no_fd3"):
        wrapped, fds, r = ["bash", "-c", 'exec "$@" 3>&-', "bash"] + cmd, (), None
    else:
        # The runner needs the pipe's write end as fd 3 exactly: pass_fds
        # keeps fd numbers, so bash moves it there before exec (not sh:
        # dash only takes one-digit fd numbers in redirections).
        r, w = os.pipe()
        wrapped = ["bash", "-c", 'exec "$@" 3>&%d %d>&-' % (w, w), "bash"] + cmd
        fds = (w,)
    chunks = []
    start = time.monotonic()
    proc = subprocess.Popen(wrapped, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=fds, cwd=workdir, env=env)
    reader = None
    if r is not None:
        os.close(w)

        def read_fd3():
            while True:
                b = os.read(r, 1 << 16)
                if not b:
                    break
                chunks.append(b)

        reader = threading.Thread(target=read_fd3, daemon=True)
        reader.start()
    try:
        out, err = proc.communicate(request, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    if reader is not None:
        reader.join(TIMEOUT)
        os.close(r)
    return proc.returncode, out, err, b"".join(chunks), seconds


def canon(value):
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def check(case, rc, out, err, fd3, seconds):
    """Returns a list of failure descriptions (empty: passed)."""
    exp = case["expected"]
    fails = []
    if rc != exp.get("exit_code", 0):
        fails.append("exit code %r, expected %r" % (rc, exp.get("exit_code", 0)))
    if "max_seconds" in exp and seconds > exp["max_seconds"]:
        fails.append("took %.1fs, more than %ss" % (seconds, exp["max_seconds"]))
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    for name, text, raw in (("stdout", stdout, out), ("stderr", stderr, err)):
        if name in exp and text != exp[name]:
            fails.append("%s %r, expected %r" % (name, text[:300], exp[name]))
        if name + "_contains" in exp and exp[name + "_contains"] not in text:
            fails.append("%s %r lacks %r" % (name, text[:300], exp[name + "_contains"]))
        if name + "_length" in exp and len(raw) != exp[name + "_length"]:
            fails.append("%s is %d bytes, expected %d" % (name, len(raw), exp[name + "_length"]))
    if exp.get("no_result"):
        if fd3:
            fails.append("unexpected result on fd 3: %r" % fd3[:300])
        return fails
    try:
        res = json.loads(fd3.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return fails + ["fd 3 is not one JSON object (%s): %r; stderr %r" % (e, fd3[:300], stderr[-500:])]
    if not isinstance(res, dict) or set(res) != {"return", "error", "error_type"}:
        return fails + ["bad result shape: %r" % (res,)]
    error, error_type = res["error"], res["error_type"]
    if error_type != exp.get("error_type"):
        fails.append("error_type %r, expected %r" % (error_type, exp.get("error_type")))
    error_expected = "error" in exp or "error_contains" in exp
    if not error_expected and error is not None:
        fails.append("unexpected error: %s" % error)
    if "error" in exp and error != exp["error"]:
        fails.append("error %r, expected %r" % (error, exp["error"]))
    contains = exp.get("error_contains", [])
    for part in [contains] if isinstance(contains, str) else contains:
        if not isinstance(error, str) or part not in error:
            fails.append("error lacks %r: %r" % (part, error))
    for part in exp.get("error_not_contains", []):
        if isinstance(error, str) and part in error:
            fails.append("error contains %r: %r" % (part, error))
    if "return_depth" in exp:
        if list_depth(res["return"]) != exp["return_depth"]:
            fails.append("return is not a list nested %d deep" % exp["return_depth"])
    elif "return_length" in exp:
        if not isinstance(res["return"], str) or len(res["return"]) != exp["return_length"]:
            fails.append("return is not a string of length %d" % exp["return_length"])
    else:
        want = exp.get("return", None)
        if canon(res["return"]) != canon(want):
            fails.append("return %s, expected %s" % (canon(res["return"])[:300], canon(want)[:300]))
    if error_expected and res["return"] is not None:
        fails.append("return must be null with an error")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", action="store_true", help="run the repo's runners with the host's python3/node")
    ap.add_argument("--bwrap", action="store_true", help="run them inside bwrap on " + ROOTFS)
    ap.add_argument("-k", metavar="TEXT", help="only cases whose name contains TEXT")
    ap.add_argument("-v", "--verbose", action="store_true", help="print output of failing cases")
    opts = ap.parse_args()
    # Requests and results of the depth cases nest 1000 levels, as nsbox
    # allows: more than json's share of the default limit here.
    sys.setrecursionlimit(5000)
    modes = [m for m in ("host", "bwrap") if getattr(opts, m)]
    if not modes:
        ap.error("choose --host and/or --bwrap")
    if "bwrap" in modes and not have_rootfs():
        ap.error("no rootfs at %s: run tools/build-rootfs (or set NSBOX_TEST_ROOTFS)" % ROOTFS)
    with open(CASES, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    try:  # the C++ suite parses this file with nlohmann::json: strict UTF-8 JSON
        json.dumps(cases, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        ap.error("%s holds a lone surrogate (%s): build such strings in the case's code" % (CASES, e))
    names = [c["name"] for c in cases]
    if len(names) != len(set(names)):
        ap.error("duplicate case names in " + CASES)
    passed = failed = skipped = 0
    for mode in modes:
        for case in cases:
            if opts.k and opts.k not in case["name"]:
                continue
            if case.get("needs_supervisor") or (case.get("needs_libs") and mode == "host" and not have_rootfs()):
                skipped += 1
                continue
            with tempfile.TemporaryDirectory(prefix="nsbox-runner-") as workdir:
                rc, out, err, fd3, seconds = run_case(mode, case, workdir)
            fails = check(case, rc, out, err, fd3, seconds)
            if fails:
                failed += 1
                print("FAIL %-5s %s (%.2fs): %s" % (mode, case["name"], seconds, "; ".join(fails)))
                if opts.verbose:
                    print("  stdout: %r\n  stderr: %r\n  fd3: %r" % (out[:2000], err[:2000], fd3[:2000]))
            else:
                passed += 1
                print("ok   %-5s %s (%.2fs)" % (mode, case["name"], seconds))
            sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed) + (", %d skipped" % skipped if skipped else ""))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
