"""The solution's process: a fresh interpreter that holds the solution and what this run needs, nothing else.

The supervisor forks, puts the file descriptors in place and ``exec``s ``__main__.py candidate``, so this process
starts with an address space of its own: the test program, the expected values and the supervisor's job are not in
it, by any route (frames, garbage collector, module tables, ``/proc/self``, the environment, argv). File descriptors:

* 0: stdin (stdin/stdout mode: a memfd with the case input; server mode: the oracle's calls; else ``/dev/null``)
* 1: stdout (stdin/stdout mode: the captured output; else ``/dev/null``); 2: ``/dev/null``
* 3: this process's reports (JSON lines, claims the parent or the oracle checks against values they alone hold)
* 4: the run as one JSON document (read and closed before confinement): ``mode``, ``code``, the calls of this run
  (calls mode), the confinement settings and the modules to import while still privileged.

Reports: ``{"k": -1, "o": "loaded"}`` once the solution module ran, then per test ``{"k", "o": "ok", "v"}`` /
``{"k", "o": "error" | "memory", "d"}`` (calls); ``{"o": "ok", "v"}`` / ``{"o": "raise", "t", "d"}`` /
``{"o": "notplain" | "memory", "d"}`` per call (server mode, assert-style tests); ``error TYPE`` / ``memory`` lines
(stdin/stdout mode, where the exit status and output count). Return values cross as plain data (`encode_result`).
"""

from __future__ import annotations

import builtins
import itertools
import json
import os
import sys
from collections.abc import Iterator

from .codec import MAX_NODES, NotPlainData, decode_value, encode_value
from .confine import clean_sys_path, confine
from .os_calls import describe, read_all, report, write_all

REPORT_FD, RUN_FD = 3, 4
_PLAIN_TYPES = (list, tuple, dict, set, frozenset, str, bytes, bytearray)  # iterable, never drained
_MEMORY_LOADING = b'{"k":-1,"o":"memory","d":"MemoryError while loading"}\n'


def main(argv: list[str]) -> int:
    run = json.loads(read_all(RUN_FD))
    os.close(RUN_FD)
    for mod in run.get("preimport", ()):  # stdlib behind a directory the sandbox uid cannot traverse (root backend)
        try:
            __import__(mod)
        except Exception:
            pass
    confine(run["backend"], run.get("uid"), run["limits"], int(run["cpu_s"]), run["workdir"])
    clean_sys_path()  # the solution imports the standard library only (or site-packages when allowed)
    mode, code = run["mode"], run["code"]
    if mode == "calls":
        cases, start = run["cases"], int(run["start"])
        del run
        run_calls(code, cases, start)
    elif mode == "server":
        del run
        serve_calls(code)
    elif mode == "stdio":
        del run
        run_stdio(code)
    os._exit(70)


def _report(rec: dict) -> None:
    report(REPORT_FD, rec)


def _resolve_callable(g: dict, name: str):
    fn = g.get(name)
    if callable(fn):
        return fn
    cls = g.get("Solution")  # LeetCode style: class Solution with the method
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    raise NameError(f"no function or Solution method named {name!r}")


def _load(code: str) -> dict:
    """Run the solution module; report ``loaded`` or end the process."""
    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    failure = None
    try:
        exec(compile(code, "<solution>", "exec"), g)
    except MemoryError:
        failure = "memory"  # reported below, once the traceback (and the memory it pins) is gone
    except BaseException as exc:  # SystemExit included: leaving early is not a pass
        failure = describe(exc)
    if failure is not None:
        g.clear()
        if failure == "memory":
            write_all(REPORT_FD, _MEMORY_LOADING)
        else:
            _report({"k": -1, "o": "error", "d": failure})
        os._exit(0)
    _report({"k": -1, "o": "loaded"})
    return g


def run_calls(code: str, cases: list, start: int) -> None:
    """Call-based cases ``start..``, in order, in this one process."""
    g = _load(code)
    for k in range(start, len(cases)):
        case = cases[k]
        rec = None
        try:
            value = _resolve_callable(g, case["fn"])(*decode_value(case["args"]))
            rec = {"k": k, "o": "ok", "v": encode_result(value)}
            value = None
        except MemoryError:
            pass
        except BaseException as exc:
            rec = {"k": k, "o": "error", "d": describe(exc)}
        if rec is None:
            value = None
            rec = {"k": k, "o": "memory", "d": "MemoryError"}
        _report(rec)
    os._exit(0)  # skip atexit handlers and non-daemon threads: every result is already reported


def encode_result(value):
    """A returned value as plain data: an iterator or generator is drained here (at most ``MAX_NODES`` items, the
    time it takes counts against the test's) and sent as a list; anything else that is not plain data raises
    `NotPlainData`."""
    if type(value) not in _PLAIN_TYPES and isinstance(value, Iterator):
        items = list(itertools.islice(value, MAX_NODES + 1))
        if len(items) > MAX_NODES:
            raise NotPlainData(f"an iterator of more than {MAX_NODES} items")
        value = items
    return encode_value(value)


def serve_calls(code: str) -> None:
    """Server mode (assert-style tests): load the solution, then answer calls ``{"fn", "a", "kw"}`` read from a
    private copy of fd 0 with ``{"o": "ok", "v"}``, ``{"o": "raise", "t", "d"}`` or ``{"o": "notplain" | "memory",
    "d"}``. Only the return value goes back: changes the solution makes to its arguments stay here, so it cannot
    rewrite a test's expected value through an argument. Leaving (``SystemExit``, ``os._exit``) ends the
    conversation, which the oracle reports as a failure."""
    requests = os.dup(0)
    os.dup2(2, 0)  # the solution reads an empty stdin
    g = _load(code)
    buf = b""
    while True:
        while b"\n" not in buf:
            chunk = os.read(requests, 1 << 16)
            if not chunk:
                os._exit(0)
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        rec = None
        try:
            msg = json.loads(line)
            args = decode_value(msg["a"])
            value = _resolve_callable(g, msg["fn"])(*args, **decode_value(msg["kw"]))
            rec = {"o": "ok", "v": encode_result(value)}
            value = None
        except MemoryError:
            pass
        except NotPlainData as exc:
            rec = {"o": "notplain", "d": str(exc)}
        except Exception as exc:
            rec = {"o": "raise", "t": type(exc).__name__, "d": describe(exc)}
        except BaseException:
            os._exit(0)
        _report(rec if rec is not None else {"o": "memory", "d": "MemoryError"})


def run_stdio(code: str) -> None:
    """stdin/stdout mode: run the solution as a script; the exit status and fd 1 are what count."""
    import io

    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    status = 0
    memory = False
    try:
        exec(compile(code, "<solution>", "exec"), g)
    except SystemExit as exc:
        status = 0 if exc.code is None or exc.code == 0 else 1
    except MemoryError:
        memory = True
    except BaseException as exc:
        os.write(REPORT_FD, f"error {type(exc).__name__}\n".encode())
        status = 1
    if memory:  # outside the except block: the traceback no longer pins the memory
        g.clear()
        os.write(REPORT_FD, b"memory\n")
        status = 1
    # Behave like a normal interpreter exit: join non-daemon threads, run atexit handlers, flush.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
    except BaseException:
        status = status or 1
    os._exit(status)
