"""Program mode, test side: the **oracle** runs the test program against stubs of the solution's names.

Test programs that cannot be split into probes (asserts inside loops, helpers, HumanEval's ``check(candidate)``)
run here, in a process forked from the supervisor after confinement. Each stub sends its plain-data arguments to
the candidate's call server (`candidate.serve_calls`, another interpreter) and rebuilds its plain-data answer, so
the test program and its expected values stay on this side of the pipe. The verdict goes on fd 3, a pipe only the
oracle and the supervisor hold; the oracle is not dumpable (inherited from the supervisor), so a candidate running
under the same uid can neither read its memory nor reach its file descriptors, only kill it (a failure).
"""

from __future__ import annotations

import json
import os

from .codec import NotPlainData, decode_value, encode_value
from .os_calls import PR_SET_DUMPABLE, describe, prctl, printable, report, write_all

VERDICT_FD = 3


class _SolutionError(Exception):
    """Raised in the tests for an exception of the solution that is not a builtin exception type."""


def _rebuilt_exception(type_name: str, detail: str) -> Exception:
    import builtins

    cls = getattr(builtins, str(type_name), None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (StopIteration, StopAsyncIteration):
        try:
            return cls(detail)
        except Exception:
            pass
    return _SolutionError(detail)


def run_tests(test: str, names: list[str], cap: int) -> None:
    """Program mode, test side: run the test program with stubs for the solution's names; report the verdict on
    fd 3 (``{"o": "ok", "v": true}`` only when the program ran to its end and called the solution)."""
    import builtins

    answers, calls = os.dup(0), os.dup(1)
    os.dup2(2, 0)  # the tests' own input/print go nowhere, never into the call channel
    os.dup2(2, 1)
    prctl(PR_SET_DUMPABLE, 0)  # a same-uid candidate cannot ptrace us or open /proc/<us>/fd
    buf = bytearray()

    def finish(rec: dict) -> None:
        report(VERDICT_FD, rec)
        os._exit(0)

    def answer() -> dict:
        while b"\n" not in buf:
            chunk = os.read(answers, 1 << 16)
            if not chunk:
                finish({"o": "error", "d": "the solution process ended (or left) before answering"})
            buf.extend(chunk)
            if len(buf) > cap:
                finish({"o": "error", "d": "answer larger than the output limit"})
        i = buf.index(b"\n")
        line = bytes(buf[:i])
        del buf[: i + 1]
        try:
            rec = json.loads(line)
            if type(rec) is not dict or rec.get("o") not in ("ok", "raise", "memory", "loaded", "error"):
                raise ValueError
            return rec
        except (ValueError, RecursionError):
            finish({"o": "error", "d": "malformed answer from the solution process"})

    first = answer()
    if first.get("o") != "loaded":
        outcome = "memory" if first.get("o") == "memory" else "error"
        finish({"o": outcome, "d": "solution did not load: " + str(first.get("d", ""))[:300]})
    report(VERDICT_FD, {"o": "loaded"})
    ncalls = [0]

    def stub_for(name: str):
        def stub(*args, **kwargs):
            try:
                payload = {"fn": name, "a": encode_value(list(args)), "kw": encode_value(dict(kwargs))}
            except NotPlainData as exc:
                raise TypeError(f"cannot pass to the solution: {exc}") from None
            ncalls[0] += 1
            try:
                write_all(calls, (json.dumps(payload, separators=(",", ":")) + "\n").encode())
            except OSError:
                finish({"o": "error", "d": "the solution process ended (or left)"})
            rec = answer()
            if rec["o"] == "memory":
                finish({"o": "memory", "d": "MemoryError in the solution"})
            if rec["o"] == "raise":
                raise _rebuilt_exception(rec.get("t", ""), printable(rec.get("d", ""), 300))
            if rec["o"] != "ok":
                finish({"o": "error", "d": "protocol violation by the solution process"})
            try:
                value = decode_value(rec.get("v"))
            except (ValueError, TypeError, RecursionError):
                finish({"o": "error", "d": "undecodable answer from the solution process"})
            return value

        stub.__name__ = stub.__qualname__ = name
        return stub

    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    for name in names:
        g[name] = stub_for(name)
    try:
        exec(compile(test, "<tests>", "exec"), g)
    except MemoryError:
        finish({"o": "memory", "d": "MemoryError in the tests"})
    except BaseException as exc:  # a failed assert, or an error of (or re-raised from) the solution
        finish({"o": "ok", "v": False, "d": describe(exc)})
    if ncalls[0] == 0:
        finish({"o": "ok", "v": False, "d": "the tests never called the solution"})
    finish({"o": "ok", "v": True})
