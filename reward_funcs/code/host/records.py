"""Reading the supervisor's records: the job goes in on stdin, JSON lines come back on the result pipe, and a
per-record deadline backs up the supervisor's own timers."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time

STARTED = -2  # the record index of "the first solution process is starting" (see Supervisor.start_candidate)


def pump(
    proc: subprocess.Popen,
    r: int,
    payload: bytes,
    records: dict,
    stderr: bytearray,
    nonce: str,
    timeout_s: float,
    on_record,
    startup_s: float,
) -> bool:
    """Feed ``payload`` to the supervisor and collect its records into ``records`` until it ends, ``on_record``
    asks to stop or the deadline passes (the caller then kills the sandbox). True once a solution process started:
    from then on a supervisor that dies may have been killed by it (see ``sandbox.run_job``)."""
    sel = selectors.DefaultSelector()
    stdin_fd = proc.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    sel.register(stdin_fd, selectors.EVENT_WRITE, "in")
    sel.register(r, selectors.EVENT_READ, "res")
    sel.register(proc.stderr.fileno(), selectors.EVENT_READ, "err")
    # Between two supervisor records at most ~2 timeouts pass legitimately (a fresh candidate process re-loads the
    # solution module, then runs the next test), plus process start-up on a loaded machine.
    grace = 2 * timeout_s + 5.0
    deadline = time.monotonic() + startup_s + grace
    sent, buf, started = 0, b"", False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return started  # backstop: the caller kills the whole sandbox
            for key, _ in sel.select(timeout=left):
                if key.data == "in":
                    sent = _feed(proc, stdin_fd, payload, sent, sel)
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                if key.data == "err":
                    if len(stderr) < 65536:
                        stderr += chunk
                    continue
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    rec = json.loads(line)  # the supervisor's own channel: malformed data is a bug, not a cheat
                    if rec.get("nonce") != nonce:
                        raise RuntimeError("sandbox result without the run's nonce")
                    deadline = time.monotonic() + grace
                    if rec.get("o") == "end":
                        return started
                    if rec.get("k") == STARTED:
                        started = True
                        continue
                    if _keep(rec, line, records, on_record):
                        return started
    finally:
        sel.close()
    return started


def _feed(proc: subprocess.Popen, stdin_fd: int, payload: bytes, sent: int, sel: selectors.BaseSelector) -> int:
    """Write the next piece of the job; close stdin once all of it is written (or the supervisor stopped reading)."""
    try:
        sent += os.write(stdin_fd, payload[sent : sent + (1 << 16)])
    except BrokenPipeError:
        sent = len(payload)
    if sent >= len(payload):
        sel.unregister(stdin_fd)
        proc.stdin.close()
    return sent


def _keep(rec: dict, line: bytes, records: dict, on_record) -> bool:
    """Store one test's record; True when ``on_record`` asks to stop the run."""
    rec["size"] = len(line)  # the parent's own field: what keeping this value would cost
    if on_record is None:
        records[rec["k"]] = rec
        return False
    # Keep the outcome only: values (up to output_bytes each) are the callback's to keep or drop.
    records[rec["k"]] = {key: v for key, v in rec.items() if key not in ("v", "out")}
    return bool(on_record(rec))
