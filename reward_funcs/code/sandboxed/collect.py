"""The supervisor's side of each run: read a process's reports, enforce the wall time, turn them into records.

Each ``collect_*`` function watches one started process (its pidfd and its report pipe) until it reports, exits or
runs out of time, emits the supervisor's records through ``sup.emit`` and kills what is left through
``sup.kill_candidates``. What a candidate reports are claims; the records are the supervisor's.
"""

from __future__ import annotations

import json
import os
import select
import time

from .codec import check_size
from .os_calls import printable, reap_zombies_except, wait_status


def dead_outcome(status: str) -> str:
    """The outcome of a process that ended before reporting: out of CPU time is a timeout, anything else an error."""
    return "timeout" if status == "signal SIGXCPU" else "error"


def parse_report(line: bytes) -> dict | None:
    """One report line of a started process as a dict with an ``"o"``, or None when it is anything else: the line is
    the candidate's (or the tests') to write, so no content of it may raise here (a ``[`` x 100000 line makes
    ``json.loads`` raise ``RecursionError``). A value ``"v"`` beyond the codec's size limits counts as malformed."""
    try:
        rec = json.loads(line)
        if type(rec) is not dict or "o" not in rec:
            return None
        check_size(rec.get("v"))
        return rec
    except (ValueError, RecursionError, MemoryError):
        return None


class _ReportPipe:
    """A started process's report pipe and its pidfd: complete lines as they come, until the process has exited and
    the pipe holds nothing more (a descendant may still hold the write end open, so it is then read without
    blocking)."""

    def __init__(self, pid: int, r: int, cap: int) -> None:
        self.pid, self.r, self.cap = pid, r, cap
        self.pidfd = os.pidfd_open(pid)
        self.watch = [r, self.pidfd]
        self.status: str | None = None  # how the process ended, once it has
        self.buf = self.chunk = b""

    def lines(self, wait: float) -> list[bytes] | None:
        """The complete lines read within ``wait`` seconds (at most 0.5 s), None once more than ``cap`` bytes are
        pending."""
        ready, _, _ = select.select(self.watch, [], [], 0 if self.status is not None else min(wait, 0.5))
        self.chunk = b""
        if not ready and self.status is None:
            reap_zombies_except(self.pid)
            return []
        if self.pidfd in ready:
            self.status = wait_status(self.pid)
            self.watch.remove(self.pidfd)
            os.set_blocking(self.r, False)
        if self.r in ready or self.status is not None:
            try:
                self.chunk = os.read(self.r, 1 << 16)
            except BlockingIOError:
                pass
            if not self.chunk and self.r in self.watch:
                self.watch.remove(self.r)
        self.buf += self.chunk
        if len(self.buf) > self.cap:
            return None
        *complete, self.buf = self.buf.split(b"\n")
        return complete

    @property
    def ended(self) -> bool:
        return self.status is not None and not self.chunk

    def close(self) -> None:
        os.close(self.pidfd)


class _CallsRun:
    """Tests ``k..n-1`` of one process (a candidate running call-based cases, or the oracle running assert-style
    tests): each report becomes the supervisor's record; each method returns the index of the next test to run in
    a fresh process once this one is done with, else None."""

    def __init__(self, sup, k: int, n: int, timeout: float) -> None:
        self.sup, self.k, self.n, self.timeout = sup, k, n, timeout
        self.loaded = False
        self.deadline = time.monotonic() + timeout

    def stop(self, outcome: str, detail: str, rest: bool = False) -> int:
        """Kill the run's processes; fail test k (``rest``: every test left) with ``outcome``."""
        self.sup.kill_candidates()
        if rest:
            self.sup.fail_rest(self.k, self.n, outcome, detail)
            return self.n
        self.sup.emit({"k": self.k, "o": outcome, "d": detail})
        return self.k + 1

    def timed_out(self) -> int:
        if not self.loaded:
            return self.stop("timeout", "solution module did not finish loading in time", rest=True)
        return self.stop("timeout", f"no result within {self.timeout:g} s")

    def take(self, line: bytes) -> int | None:
        rec = parse_report(line)
        if rec is None or "k" not in rec:
            return self.stop("error", "malformed (or too large) report from the candidate process")
        rk, outcome, detail = rec["k"], rec["o"], printable(rec.get("d", ""))
        if not self.loaded:
            if rk != -1 or outcome not in ("loaded", "error", "memory"):
                return self.stop("error", "protocol violation while loading", rest=True)
            if outcome != "loaded":
                return self.stop(outcome, detail, rest=True)
            self.loaded = True
            self.deadline = time.monotonic() + self.timeout
            return None
        if rk != self.k or outcome not in ("ok", "error", "memory"):
            return self.stop("error", "protocol violation")
        out = {"k": self.k, "o": outcome, "d": detail}
        if outcome == "ok":
            out["v"] = rec.get("v")
        self.sup.emit(out)
        self.k += 1
        self.deadline = time.monotonic() + self.timeout
        return self.n if self.k == self.n else None

    def ended(self, status: str) -> int:
        """The process exited (or closed its report pipe and exited) before reporting test k."""
        if not self.loaded:
            return self.stop("error", f"solution module did not load ({status})", rest=True)
        return self.stop(dead_outcome(status), f"process ended before reporting ({status})")


def collect_calls(sup, pid: int, r: int, k: int, n: int, timeout: float) -> int:
    """Read the reports of process ``pid`` about tests ``k..n-1`` (see `_CallsRun`): a candidate running call-based
    cases, or the oracle running assert-style tests. Return the index of the next test to run in a fresh process."""
    pipe = _ReportPipe(pid, r, int(sup.limits["output_bytes"]))
    run = _CallsRun(sup, k, n, timeout)
    try:
        while True:
            wait = run.deadline - time.monotonic()
            if wait <= 0:
                return run.timed_out()
            lines = pipe.lines(wait)
            if lines is None:
                return run.stop("error", "result larger than the output limit")
            for line in lines:
                nxt = run.take(line)
                if nxt is not None:
                    return nxt
            if pipe.ended:
                return run.ended(pipe.status)
    finally:
        pipe.close()


def collect_stdio(sup, pid: int, out_r: int, rep_r: int, timeout: float, cap: int) -> dict:
    out = bytearray()
    report = b""
    start = time.monotonic()
    pidfd = os.pidfd_open(pid)
    try:
        fds = [out_r, rep_r, pidfd]
        status = None
        while True:
            wait = start + timeout - time.monotonic()
            if wait <= 0:
                sup.kill_candidates()
                return {"o": "timeout", "d": f"no exit within {timeout:g} s", "out": ""}
            ready, _, _ = select.select([f for f in fds if f is not None], [], [], wait)
            if out_r in ready:
                chunk = os.read(out_r, 1 << 16)
                if chunk:
                    out += chunk
                    if len(out) > cap:
                        sup.kill_candidates()
                        return {"o": "error", "d": "output limit exceeded", "out": ""}
                else:
                    fds[0] = None
            if rep_r in ready:
                chunk = os.read(rep_r, 4096)
                if chunk and len(report) < 4096:
                    report += chunk
                elif not chunk:
                    fds[1] = None
            if pidfd in ready:
                status = wait_status(pid)
                break
        # The process has exited; descendants may still hold the pipe: collect what is buffered, then kill them.
        sup.kill_candidates()
        for fd, sink in ((out_r, out),):
            os.set_blocking(fd, False)
            try:
                while len(sink) <= cap and (chunk := os.read(fd, 1 << 16)):
                    sink += chunk
            except BlockingIOError:
                pass
        if len(out) > cap:
            return {"o": "error", "d": "output limit exceeded", "out": ""}
    finally:
        os.close(pidfd)
    claim = report.decode(errors="replace").strip().splitlines()
    claim = claim[-1] if claim else ""
    text = out.decode("utf-8", errors="replace")
    if claim.startswith("memory"):
        return {"o": "memory", "d": "MemoryError", "out": text}
    if status == "exit 0":
        return {"o": "ran", "d": "", "out": text}
    detail = f"{status}" + (f": {claim}" if claim else "")
    rec = {"o": dead_outcome(status), "d": printable(detail), "out": text}
    if claim.startswith("error SyntaxError"):
        rec["syntax"] = True
    return rec
