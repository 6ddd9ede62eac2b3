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


def collect_calls(sup, pid: int, r: int, k: int, cases: list, timeout: float) -> int:
    """Read the candidate's reports; return the index of the next probe to run in a fresh process."""
    buf = b""
    loaded = False
    deadline = time.monotonic() + timeout
    cap = int(sup.limits["output_bytes"])
    pidfd = os.pidfd_open(pid)
    watch = [r, pidfd]
    status = None
    try:
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                sup.kill_candidates()
                if not loaded:
                    sup.fail_rest(k, "timeout", "solution module did not finish loading in time")
                    return len(cases)
                sup.emit({"k": k, "o": "timeout", "d": f"no result within {timeout:g} s"})
                return k + 1
            # Once the process has exited only buffered data is left: poll without blocking, since a
            # descendant may still hold the write end of the pipe open.
            ready, _, _ = select.select(watch, [], [], 0 if status is not None else min(wait, 0.5))
            if not ready and status is None:
                reap_zombies_except(pid)
                continue
            if pidfd in ready:
                status = wait_status(pid)
                watch.remove(pidfd)
                os.set_blocking(r, False)
            chunk = b""
            if r in ready or status is not None:
                try:
                    chunk = os.read(r, 1 << 16)
                except BlockingIOError:
                    chunk = b""
                if not chunk and r in watch:
                    watch.remove(r)
            buf += chunk
            if len(buf) > cap:
                sup.kill_candidates()
                sup.emit({"k": k, "o": "error", "d": "result larger than the output limit"})
                return k + 1
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                rec = parse_report(line)
                if rec is None or "k" not in rec:
                    sup.kill_candidates()
                    sup.emit({"k": k, "o": "error", "d": "malformed (or too large) report from the candidate process"})
                    return k + 1
                rk, outcome = rec["k"], rec["o"]
                if not loaded:
                    if rk != -1 or outcome not in ("loaded", "error", "memory"):
                        sup.kill_candidates()
                        sup.fail_rest(k, "error", "protocol violation while loading")
                        return len(cases)
                    if outcome != "loaded":
                        sup.fail_rest(k, outcome, printable(rec.get("d", "")))
                        return len(cases)
                    loaded = True
                    deadline = time.monotonic() + timeout
                    continue
                if rk != k or outcome not in ("ok", "error", "memory"):
                    sup.kill_candidates()
                    sup.emit({"k": k, "o": "error", "d": "protocol violation"})
                    return k + 1
                out = {"k": k, "o": outcome, "d": printable(rec.get("d", ""))}
                if outcome == "ok":
                    out["v"] = rec.get("v")
                sup.emit(out)
                k += 1
                if k == len(cases):
                    return k
                deadline = time.monotonic() + timeout
            if status is not None and not chunk:
                # Exited (or closed its report pipe and exited) before reporting the current probe.
                if not loaded:
                    sup.fail_rest(k, "error", f"solution module did not load ({status})")
                    return len(cases)
                sup.emit({"k": k, "o": dead_outcome(status), "d": f"process ended before reporting ({status})"})
                return k + 1
    finally:
        os.close(pidfd)


def collect_program(sup, pid: int, r: int, timeout: float) -> dict:
    """The oracle's verdict: loading the solution and running the tests get ``timeout`` seconds each."""
    buf = b""
    loaded = False
    deadline = time.monotonic() + timeout
    pidfd = os.pidfd_open(pid)
    status = None
    try:
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                sup.kill_candidates()
                what = "the tests did not finish" if loaded else "the solution module did not finish loading"
                return {"o": "timeout", "d": f"{what} within {timeout:g} s"}
            watch = [r] if status is not None else [r, pidfd]
            ready, _, _ = select.select(watch, [], [], 0 if status is not None else min(wait, 0.5))
            if not ready and status is None:
                reap_zombies_except(pid)
                continue
            if pidfd in ready:
                status = wait_status(pid)
                os.set_blocking(r, False)
            try:
                chunk = os.read(r, 1 << 16) if (r in ready or status is not None) else b""
            except BlockingIOError:
                chunk = b""
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                rec = parse_report(line)
                if rec is None:
                    return {"o": "error", "d": "malformed report from the test process"}
                outcome = rec["o"]
                if outcome == "loaded" and not loaded:
                    loaded = True
                    deadline = time.monotonic() + timeout
                    continue
                if outcome not in ("ok", "error", "memory"):
                    return {"o": "error", "d": "protocol violation"}
                return {"o": outcome, "v": rec.get("v") is True, "d": printable(rec.get("d", ""))}
            if status is not None and not chunk:
                return {"o": "error", "d": f"the test process ended without a verdict ({status})"}
    finally:
        os.close(pidfd)


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
