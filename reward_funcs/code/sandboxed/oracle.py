"""Assert-style tests, test side: the **oracle** runs the test program against stubs of the solution's names.

Every assert-style test runs here, in a process forked from the supervisor after confinement. Each solution name is
a stub that sends its plain-data arguments to the candidate's call server (`candidate.serve_calls`, another
interpreter) and rebuilds its plain-data answer as builtin values only, so the test program, its expected values and
everything it computes stay on this side of the pipe, and no object of the solution takes part in a check.

The program comes as *steps* (``[source, unit]``): unit ``k >= 0`` is test ``k`` (a top-level assert, or the whole
program as one test), ``-1`` a statement that sets the tests up. The oracle runs them in order from test ``start``
(earlier tests are skipped: a fresh pair of processes continues after a test that timed out or killed the
candidate) and reports on fd 3 in the candidate's ``calls`` protocol (`collect.collect_calls` reads both):
``{"k": -1, "o": "loaded"}`` once the solution loaded, then per test ``{"k", "o": "ok", "v": passed, "d"}`` or
``{"k", "o": "error" | "memory", "d"}``. fd 3 is a pipe only the oracle and the supervisor hold; the oracle is not
dumpable (inherited from the supervisor), so a candidate under the same uid can neither read its memory nor reach
its file descriptors, only kill it (a failure).
"""

from __future__ import annotations

import json
import os

from .codec import NotPlainData, check_size, decode_value, encode_value
from .os_calls import PR_SET_DUMPABLE, prctl, printable, report, write_all

VERDICT_FD = 3


class _SolutionError(Exception):
    """Raised in the tests for an exception of the solution that is not a builtin exception type."""


class _Verdict(BaseException):
    """Ends the current test with an outcome the tests cannot change (see `Channel.verdict`)."""


def _describe(exc: BaseException) -> str:
    """An exception as a detail; never raises (the message may hold a decoded value ``str()`` refuses)."""
    try:
        return f"{type(exc).__name__}: {exc}"[:300]
    except Exception:
        return type(exc).__name__


def _rebuilt_exception(type_name: str, detail: str) -> Exception:
    import builtins

    cls = getattr(builtins, str(type_name), None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (StopIteration, StopAsyncIteration):
        try:
            return cls(detail)
        except Exception:
            pass
    return _SolutionError(detail)


def _decode_answer(line: bytes):
    """The answer record on one line, or None when it is malformed or beyond the codec's limits; nothing the candidate
    writes may raise here (a 400-digit complex part, a 700,000-item list, 66 levels of nesting)."""
    try:
        rec = json.loads(line)
        if type(rec) is not dict or rec.get("o") not in ("ok", "raise", "memory", "notplain", "loaded", "error"):
            return None
        check_size(rec.get("v"))
        if rec["o"] == "ok":
            rec["v"] = decode_value(rec.get("v"))
        return rec
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError):
        return None


class Channel:
    """The oracle's end of the candidate's call server: one call at a time, answers decoded into builtins.

    ``verdict`` holds the outcome that ends the current test when a call cannot give the tests a value (the solution
    ran out of memory, returned something that is not plain data, or broke the protocol): set before `_Verdict` is
    raised, so a test that catches every exception still gets it. ``dead`` is set once the candidate process is gone
    or out of step: every later call fails, and the oracle ends after this test's record.
    """

    def __init__(self, answers: int, calls: int, cap: int) -> None:
        self.answers, self.calls, self.cap = answers, calls, cap
        self.buf = bytearray()
        self.count = 0  # calls made by the tests in this process
        self.verdict: tuple[str, str] | None = None
        self.dead = False
        self.raised: Exception | None = None  # the last exception of the solution raised into the tests

    def fail(self, outcome: str, detail: str, dead: bool = False):
        self.verdict = (outcome, detail)
        self.dead = self.dead or dead
        raise _Verdict(detail)

    def read(self) -> dict:
        while b"\n" not in self.buf:
            chunk = os.read(self.answers, 1 << 16) if not self.dead else b""
            if not chunk:
                self.fail("error", "the solution process ended (or left) before answering", dead=True)
            self.buf.extend(chunk)
            if len(self.buf) > self.cap:
                self.fail("error", "answer larger than the output limit", dead=True)
        i = self.buf.index(b"\n")
        line = bytes(self.buf[:i])
        del self.buf[: i + 1]
        rec = _decode_answer(line)
        if rec is None:
            self.fail("error", "malformed, undecodable or too large answer from the solution process", dead=True)
        return rec

    def call(self, name: str, args: tuple, kwargs: dict):
        if self.dead:
            self.fail(*(self.verdict or ("error", "the solution process is gone")))
        try:
            payload = {"fn": name, "a": encode_value(list(args)), "kw": encode_value(dict(kwargs))}
        except NotPlainData as exc:
            raise TypeError(f"cannot pass to the solution: {exc}") from None
        self.count += 1
        try:
            write_all(self.calls, (json.dumps(payload, separators=(",", ":")) + "\n").encode())
        except OSError:
            self.fail("error", "the solution process ended (or left)", dead=True)
        rec = self.read()
        o = rec["o"]
        if o == "ok":
            return rec["v"]
        if o == "raise":
            self.raised = _rebuilt_exception(rec.get("t", ""), printable(rec.get("d", ""), 300))
            raise self.raised
        if o == "memory":
            self.fail("memory", "MemoryError in the solution")
        if o == "notplain":
            self.fail("error", "the solution returned " + printable(rec.get("d", ""), 200))
        self.fail("error", "protocol violation by the solution process", dead=True)

    def stub(self, name: str):
        def stub(*args, **kwargs):
            return self.call(name, args, kwargs)

        stub.__name__ = stub.__qualname__ = name
        return stub


def run_step(source: str, g: dict, channel: Channel) -> tuple[str, bool, str]:
    """Run one step in the tests' globals: (outcome, passed, detail). A failed assert or an exception fails the
    step (an ``error`` when it is the solution's, let through by the tests); a call's verdict (`Channel.verdict`)
    overrides whatever the tests made of it."""
    channel.verdict = channel.raised = None
    result: tuple[str, bool, str] = ("ok", True, "")
    try:
        exec(compile(source, "<tests>", "exec"), g)
    except MemoryError:
        result = ("memory", False, "MemoryError in the tests")
    except BaseException as exc:  # a failed assert, or an error of the solution the tests let through
        result = ("error" if exc is channel.raised else "ok", False, _describe(exc))
    if channel.verdict is not None:
        outcome, detail = channel.verdict
        result = (outcome, False, detail)
    return result


def run_steps(steps: list, names: list[str], start: int, units: int, channel: Channel) -> None:
    """Run the steps from test ``start`` on with stubs for ``names`` and report each test (module docstring)."""
    import builtins

    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    for name in names:
        g[name] = channel.stub(name)
    for source, unit in steps:
        if 0 <= unit < start:
            continue
        outcome, passed, detail = run_step(source, g, channel)
        if unit < 0 and not passed:  # a statement the tests need failed: so do the tests left
            for k in range(start, units):
                report(VERDICT_FD, {"k": k, "o": outcome, "v": False, "d": "test setup failed: " + detail})
            return
        if unit < 0:
            continue
        if passed and channel.count == 0:  # `assert isclose(1, 1)` after `from math import *` tests nothing
            passed, detail = False, "the tests never called the solution"
        report(VERDICT_FD, {"k": unit, "o": outcome, "v": passed, "d": detail})
        start = unit + 1
        if channel.dead:
            return  # the supervisor continues with a fresh pair of processes


def run_tests(steps: list, names: list[str], start: int, units: int, cap: int) -> None:
    """The oracle's entry point: wait for the solution to load, then run the tests from ``start`` (see the module
    docstring); the process ends here."""
    answers, calls = os.dup(0), os.dup(1)
    os.dup2(2, 0)  # the tests' own input/print go nowhere, never into the call channel
    os.dup2(2, 1)
    prctl(PR_SET_DUMPABLE, 0)  # a same-uid candidate cannot ptrace us or open /proc/<us>/fd
    channel = Channel(answers, calls, cap)
    try:
        first = channel.read()
    except _Verdict:
        first = {"o": "error", "d": channel.verdict[1]}
    if first.get("o") != "loaded":
        outcome = "memory" if first.get("o") == "memory" else "error"
        report(VERDICT_FD, {"k": -1, "o": outcome, "d": "solution did not load: " + printable(first.get("d", ""))})
        os._exit(0)
    report(VERDICT_FD, {"k": -1, "o": "loaded"})
    run_steps(steps, names, start, units, channel)
    os._exit(0)
