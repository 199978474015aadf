"""nsbox Python runner: runs one agent code node and reports main()'s result.

Protocol (docs/RUNNERS.md): the request {"code": str, "inputs": object} is
read from fd 0 until EOF, then fd 0 is pointed at /dev/null. User output goes
to fd 1/2 untouched. One JSON object {"return", "error", "error_type"} is
written to fd 3, which is then closed; exit status 0 whenever it was written.
Without a usable fd 3 the runner says so on stderr and exits 70.

Only os, sys and _json (json's C accelerator) are imported at startup:
`import json` pulls in re and enum and would double the interpreter's
start-up. The request and the result go through the same C scanner and
encoder that json.loads and json.dumps use, with json's settings; anything
unusual (an error to report, a byte-order mark) falls back to json itself,
so every answer and message is json's. traceback is imported only to format
an error, asyncio only when main gives back an awaitable.
"""
import os
import sys

try:
    from _json import encode_basestring as _c_encode_str
    from _json import encode_basestring_ascii as _c_encode_str_ascii
    from _json import make_encoder as _c_make_encoder
    from _json import make_scanner as _c_make_scanner
except ImportError:  # a Python without the accelerator: json does it all
    _c_make_scanner = _c_make_encoder = _c_encode_str = _c_encode_str_ascii = None

RESULT_FD = 3
USER_FILE = "<user_code>"  # the file name in tracebacks, as the platform's
MISSING_MAIN = "code must define a function main(args)"
NAN_MESSAGE = "Out of range float values are not JSON compliant"
EX_SOFTWARE = 70  # no result could be delivered

# Captured now: user code shares sys.modules and could patch json or os.
_write, _close, _getpid = os.write, os.close, os.getpid
_exit = os._exit
_modules, _Module = sys.modules, type(sys)
_getrecursionlimit, _setrecursionlimit = sys.getrecursionlimit, sys.setrecursionlimit
_JSON_SPACE = " \t\n\r"  # json's WHITESPACE
# nsbox lets requests and results nest 1000 levels deep (kMaxJsonDepth).
# json's C scanner and encoder count each level against the recursion limit,
# which is 1000 in all, the runner's own frames included; this many leaves
# room for those frames and for a JSONEncoder.default of user code.
_JSON_RECURSION_LIMIT = 1200


def _with_room_for_json_depth(fn, *args, **kwargs):
    """fn(*args, **kwargs) with a recursion limit that lets json nest as
    deep as nsbox allows; the limit user code set is put back after."""
    limit = _getrecursionlimit()
    _setrecursionlimit(max(limit, _JSON_RECURSION_LIMIT))
    try:
        return fn(*args, **kwargs)
    finally:
        _setrecursionlimit(limit)


def _json():
    """The json module, for the rare paths (errors); imported on first use."""
    import json

    return json


class _DecoderSettings:
    """What json.JSONDecoder() hands its C scanner (json.loads' defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_scan = _c_make_scanner(_DecoderSettings()) if _c_make_scanner else None


def _loads(raw):
    """json.loads(raw) for a request, which starts with '{"' (so json would
    decode it as UTF-8); anything else, and every error, is json's."""
    if _scan is not None and raw[:2] == b'{"':
        try:
            text = raw.decode("utf-8", "surrogatepass")
            value, end = _scan(text, 0)
            if not text[end:].strip(_JSON_SPACE):
                return value
        except Exception:
            # json.loads says what is wrong. (The scanner alone cannot: in
            # 3.11 it raises SystemError until json.decoder is imported.)
            pass
    return _json().loads(raw)


def _not_serializable(o):
    """json.JSONEncoder.default: the same TypeError, word for word."""
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _dumps(value, ensure_ascii, allow_nan=True):
    """json.dumps(value, ensure_ascii=..., allow_nan=...) for a dict, as
    json.dumps would encode it at this moment."""
    json = _modules.get("json")
    if type(json) is _Module:
        # User code imported json: encode the way json.dumps does, with the
        # module's encoder as it is now, so that a patched JSONEncoder (the
        # usual idiom for custom types) is honoured. json.dumps itself need
        # not be intact.
        if ensure_ascii and allow_nan:
            return json._default_encoder.encode(value)
        return json.JSONEncoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan).encode(value)
    if _c_make_encoder is None:
        return _json().dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    # The arguments json.JSONEncoder.iterencode gives the C encoder for these
    # settings.
    encode_str = _c_encode_str_ascii if ensure_ascii else _c_encode_str
    encode = _c_make_encoder({}, _not_serializable, encode_str, None, ": ", ", ", False, False, allow_nan)
    return "".join(encode(value, 0))


class Args:
    """Default Args for plugin-style code (`def main(args: Args)` reading
    args.params[...]); a user-defined class Args replaces it."""

    def __init__(self, params):
        self.params = params


Args.__module__ = "user_code"


class ContractError(Exception):
    pass


def _result_fd_ok():
    try:
        st = os.fstat(RESULT_FD)
    except OSError:
        return False
    # Python has closed its script file by now, so an open fd 3 was
    # inherited; still accept only what a result channel can be (pipe,
    # socket, regular file, character device), as the Node runner must.
    return (st.st_mode & 0o170000) in (0o010000, 0o140000, 0o100000, 0o020000)


def _read_request():
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(0, 1 << 20)
            except BlockingIOError:  # a non-blocking pipe: wait for data
                import select

                select.select([0], [], [])
                continue
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as e:
        raise ContractError("request: cannot read fd 0: %s" % e.strerror)
    finally:
        # User code reading stdin must see EOF, not the request or a hang.
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            if null != 0:
                os.dup2(null, 0)
                os.close(null)
        except OSError:
            pass
    try:
        req = _with_room_for_json_depth(_loads, b"".join(chunks))
    except (ValueError, RecursionError) as e:
        raise ContractError("request: invalid JSON: %s" % e)
    if not isinstance(req, dict):
        raise ContractError("request: expected a JSON object")
    code, inputs = req.get("code"), req.get("inputs", {})
    if not isinstance(code, str):
        raise ContractError('request: "code" must be a string')
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise ContractError('request: "inputs" must be an object')
    return code, inputs


def _format_exception(e, code):
    """The traceback as Python prints it, minus the frames that come before
    the first frame of user code (the runner's and asyncio's)."""
    import linecache
    import traceback

    # Source lines for the traceback (there is no file to read: the name is
    # "<user_code>"). mtime None: never stale.
    linecache.cache[USER_FILE] = (len(code), None, code.splitlines(True), USER_FILE)

    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != USER_FILE:
        tb = tb.tb_next
    lines = traceback.format_exception(type(e), e, tb)
    if isinstance(e, SystemExit):
        lines[-1] = "SystemExit: %s\n" % (e.code,)
    return "".join(lines).rstrip("\n")


def _run(code, inputs):
    """Returns (value, None, None) or (None, message, error_type)."""
    if code.startswith("\ufeff"):
        # A byte-order mark, which python3 skips at the start of a file and
        # Node at the start of a script; compile() calls it a syntax error.
        code = code[1:]
    try:
        compiled = compile(code, USER_FILE, "exec", dont_inherit=True)
    except SyntaxError as e:
        import traceback

        msg = "".join(traceback.format_exception_only(type(e), e))
        return None, msg.rstrip("\n"), "syntax"
    except ValueError as e:  # e.g. NUL bytes in the source (3.11)
        return None, "SyntaxError: %s" % e, "syntax"

    module = type(sys)("user_code")
    module.Args = Args
    sys.modules["user_code"] = module  # dataclasses, pickle, typing look here
    ns = module.__dict__
    try:
        exec(compiled, ns)
        args_cls, main = ns.get("Args", Args), ns.get("main", _missing)
        if main is _missing:
            return None, MISSING_MAIN, "contract"
        if not callable(main):
            msg = "%s; main is not callable (it is of type %s)" % (MISSING_MAIN, type(main).__name__)
            return None, msg, "contract"
        if not callable(args_cls):
            return None, "Args is not callable (it is of type %s)" % type(args_cls).__name__, "contract"
        value = main(args_cls(inputs))
        if hasattr(type(value), "__await__"):
            import asyncio

            if not asyncio.iscoroutine(value):
                value = _await(value)
            # Not asyncio.run: on its way out it cancels the tasks main left
            # and waits for them, and joins the default executor's threads,
            # without a bound (a to_thread call that wait_for gave up on
            # would hold the result until the run's time limit). The runner
            # waits for no leftover work once the result is known.
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            value = loop.run_until_complete(value)
        return value, None, None
    except BaseException as e:  # SystemExit and KeyboardInterrupt included
        return None, _format_exception(e, code), "exception"


_missing = object()


async def _await(awaitable):
    return await awaitable


def _encode(value, error, error_type):
    result = {"return": value, "error": error, "error_type": error_type}
    try:
        text = _with_room_for_json_depth(_dumps, result, ensure_ascii=False, allow_nan=False)
    except BaseException as e:  # json may call user code (dict subclasses...)
        import traceback

        if isinstance(e, ValueError) and str(e) == NAN_MESSAGE:
            e = _name_nan(result) or e
        msg = "".join(traceback.format_exception_only(type(e), e)).rstrip("\n")
        result = {"return": None, "error": msg, "error_type": "serialization"}
        text = _dumps(result, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them as \udXXX
        return _with_room_for_json_depth(_dumps, result, ensure_ascii=True).encode("ascii")


def _name_nan(result):
    """json's C encoder (3.11) does not say which float was out of range;
    its pure-Python encoder (iterencode without _one_shot) does: "...: nan"."""
    try:
        for _ in _json().JSONEncoder(ensure_ascii=False, allow_nan=False).iterencode(result):
            pass
    except ValueError as e:
        if str(e).startswith(NAN_MESSAGE + ": "):
            return e
    except BaseException:
        pass
    return None


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            view = view[_write(fd, view):]
        except BlockingIOError:  # a non-blocking pipe that is full
            import select

            select.select([], [fd], [], 1.0)


def _flush_user_output():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def run():
    if not _result_fd_ok():
        sys.stderr.write(
            "nsbox runner: fd 3 (the result channel) is not open; run this "
            "under nsbox or pass a pipe as fd 3 (see docs/RUNNERS.md)\n"
        )
        return EX_SOFTWARE
    # Processes that user code starts must not inherit the result channel.
    os.set_inheritable(RESULT_FD, False)
    pid = _getpid()
    try:
        code, inputs = _read_request()
    except ContractError as e:
        value, error, error_type = None, str(e), "contract"
    else:
        value, error, error_type = _run(code, inputs)
    if _getpid() != pid:  # a child that user code forked returned here
        _exit(0)
    data = _encode(value, error, error_type)
    _flush_user_output()
    try:
        _write_all(RESULT_FD, data)
        _close(RESULT_FD)
    except OSError as e:
        sys.stderr.write("nsbox runner: cannot write the result to fd 3: %s\n" % e)
        return EX_SOFTWARE
    return 0


def main():
    """Runs the request on fd 0 and exits; `python3 runner.py` and the fork
    server's workload (zygote.py) both end here."""
    try:
        status = run()
    except BaseException as e:  # a runner bug: say it, deliver no result
        try:
            sys.stderr.write("nsbox runner: internal error: %r\n" % (e,))
        except BaseException:
            pass
        status = EX_SOFTWARE
    _flush_user_output()
    # Exit now: do not wait for user threads or run user atexit handlers,
    # like the Node runner that does not wait for pending timers.
    _exit(status)


if __name__ == "__main__":
    main()
