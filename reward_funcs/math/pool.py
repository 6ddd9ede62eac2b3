"""A small pool of killable worker processes for symbolic comparisons, usable from any thread.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop a task that is stuck inside sympy (a power tower, a
huge integer), and `multiprocessing`'s spawn/forkserver re-import the user's `__main__` in the child. Here each worker
is a plain `python -c` subprocess speaking JSON lines over pipes; the parent keeps one deadline per comparison and
SIGKILLs the worker's process group when it passes, then starts a replacement. No signals are used in the parent,
so the limit holds in any thread; no files are created.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); from reward_funcs.math.worker import main; main()"
_STARTUP_TIMEOUT_S = 120.0
_MAX_START_FAILURES = 3


@dataclass
class _Task:
    gold: str
    items: list  # [(key, pred)]
    pos: int = 0  # index of the item being computed; -1 while the gold is being parsed
    gold_done: bool = False


@dataclass
class _Result:
    gold_ok: dict = field(default_factory=dict)  # gold -> bool
    verdicts: dict = field(default_factory=dict)  # key -> "T" | "F" | "E" (E: timed out or crashed)


class _Worker:
    def __init__(self, mem_mb: int) -> None:
        env = dict(os.environ)
        env["REWARD_FUNCS_MATH_MEM_MB"] = str(mem_mb)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
            start_new_session=True,  # own process group: one killpg reaps anything it started
        )
        self.rfd = self.proc.stdout.fileno()
        self.wfd = self.proc.stdin.fileno()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.ready = False
        self.task: _Task | None = None
        self.deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        self.stats_reply: str | None = None

    def send(self, payload: dict) -> None:
        self.outbuf += json.dumps(payload).encode() + b"\n"
        self.flush()

    def flush(self) -> None:
        while self.outbuf:
            try:
                n = os.write(self.wfd, self.outbuf)
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError):
                self.outbuf.clear()
                return
            del self.outbuf[:n]

    def read_lines(self) -> list[str] | None:
        """Lines available now; None on EOF (the worker died)."""
        try:
            chunk = os.read(self.rfd, 1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not chunk:
            return None
        self.inbuf += chunk
        *lines, rest = self.inbuf.split(b"\n")
        self.inbuf = bytearray(rest)
        return [ln.decode() for ln in lines]

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)  # reap: no zombie left behind
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        # Closing stdin ends the worker's read loop; kill anyway in case it is busy.
        self.kill()


class _WorkerPool:
    """Runs (gold, [preds]) tasks on `n` worker processes with a per-comparison wall-clock limit."""

    def __init__(self, n: int, mem_mb: int) -> None:
        self.n = max(1, int(n))
        self.mem_mb = mem_mb
        self.pid = os.getpid()
        self.workers: list[_Worker] = []
        self.spare: _Worker | None = None  # started after the first batch, promoted when a worker is killed
        self.lock = threading.Lock()
        self.start_failures = 0

    # ----- lifecycle -----

    def _ensure_workers(self) -> None:
        self.workers = [w for w in self.workers if w.proc.poll() is None]
        while len(self.workers) < self.n:
            self.workers.append(self._take_spare() or _Worker(self.mem_mb))

    def _take_spare(self) -> _Worker | None:
        # A warmed-up spare makes replacing a killed worker instant instead of costing a start-up (~1-2 s).
        spare, self.spare = self.spare, None
        if spare is not None and spare.proc.poll() is not None:
            spare.kill()
            return None
        return spare

    def close(self) -> None:
        with self.lock:
            for w in self.workers + ([self.spare] if self.spare else []):
                w.close()
            self.workers = []
            self.spare = None

    def worker_pids(self) -> list[int]:
        """Pids of the workers that take tasks (not the spare)."""
        return [w.proc.pid for w in self.workers]

    def all_pids(self) -> list[int]:
        return self.worker_pids() + ([self.spare.proc.pid] if self.spare else [])

    # ----- scheduling -----

    def run(self, tasks: list[_Task], timeout_s: float) -> _Result:
        with self.lock:
            return self._run(deque(t for t in tasks), float(timeout_s))

    def _run(self, queue: deque, timeout_s: float) -> _Result:
        res = _Result()
        if not queue:
            return res
        self._ensure_workers()
        sel = selectors.DefaultSelector()
        try:
            for w in self.workers:
                sel.register(w.rfd, selectors.EVENT_READ, w)
            while True:
                for w in self.workers:
                    if w.task is None and queue and w.ready:
                        self._assign(w, queue.popleft(), timeout_s)
                    w.flush()
                if not queue and all(w.task is None for w in self.workers):
                    if self.spare is None:
                        self.spare = _Worker(self.mem_mb)
                    return res
                now = time.monotonic()
                nearest = min(w.deadline for w in self.workers if w.task is not None or not w.ready)
                # Wake up at the nearest deadline, and often while a request is still being written out.
                wait = min(nearest - now, 0.05 if any(w.outbuf for w in self.workers) else 1.0)
                for key, _ in sel.select(timeout=max(0.0, wait)):
                    w = key.data
                    lines = w.read_lines()
                    if lines is None:
                        self._replace(w, sel, queue, res)
                        continue
                    for line in lines:
                        self._handle(w, line, queue, res, timeout_s)
                now = time.monotonic()
                for w in list(self.workers):
                    if (w.task is not None or not w.ready) and now > w.deadline:
                        self._replace(w, sel, queue, res)
        except BaseException:
            # Interrupted mid-batch (e.g. KeyboardInterrupt): busy workers would later answer for a task nobody
            # waits for, so they go.
            for w in [w for w in self.workers if w.task is not None]:
                w.kill()
                self.workers.remove(w)
            raise
        finally:
            sel.close()

    def _assign(self, w: _Worker, task: _Task, timeout_s: float) -> None:
        w.task = task
        task.pos = -1
        w.deadline = time.monotonic() + timeout_s
        w.send({"g": task.gold, "p": task.items, "t": timeout_s})

    def _handle(self, w: _Worker, line: str, queue: deque, res: _Result, timeout_s: float) -> None:
        tag, _, rest = line.partition(" ")
        if tag == "R":
            w.ready = True
            self.start_failures = 0
            w.deadline = float("inf")
        elif tag == "X":
            raise RuntimeError(f"math verifier worker failed to start: {rest}")
        elif tag == "S":
            w.stats_reply = rest
        elif tag == "G" and w.task is not None:
            ok = rest.strip() == "1"
            res.gold_ok[w.task.gold] = ok
            if ok and w.task.items:
                w.task.pos = 0
                w.deadline = time.monotonic() + timeout_s
            else:
                w.task = None
        elif tag == "V" and w.task is not None:
            idx_s, verdict = rest.split()
            idx = int(idx_s)
            key = w.task.items[idx][0]
            res.verdicts[key] = verdict
            w.task.pos = idx + 1
            w.deadline = time.monotonic() + timeout_s
            if w.task.pos >= len(w.task.items):
                w.task = None

    def _replace(self, w: _Worker, sel: selectors.BaseSelector, queue: deque, res: _Result) -> None:
        """Kill `w` (timed out or died), record the comparison it was stuck on, requeue the rest, start a new one."""
        task = w.task
        if not w.ready and task is None:
            self.start_failures += 1
            if self.start_failures >= _MAX_START_FAILURES:
                raise RuntimeError("math verifier workers keep failing to start (check that math-verify imports)")
        if task is not None:
            if task.pos < 0:
                res.gold_ok[task.gold] = False  # the gold itself is pathological: treat as unparseable
            else:
                res.verdicts[task.items[task.pos][0]] = "E"
                rest = task.items[task.pos + 1 :]
                if rest:
                    queue.appendleft(_Task(task.gold, rest))
        try:
            sel.unregister(w.rfd)
        except (KeyError, ValueError):
            pass
        w.kill()
        self.workers.remove(w)
        nw = self._take_spare() or _Worker(self.mem_mb)
        self.workers.append(nw)
        sel.register(nw.rfd, selectors.EVENT_READ, nw)
        if self.spare is None:
            self.spare = _Worker(self.mem_mb)

    # ----- test support -----

    def stats(self) -> list[tuple[int, int]]:
        """(gold parses, pred checks) per live worker."""
        with self.lock:
            out = []
            for w in self.workers:
                end = time.monotonic() + _STARTUP_TIMEOUT_S
                while not w.ready and w.proc.poll() is None and time.monotonic() < end:
                    for line in w.read_lines() or []:
                        w.ready = w.ready or line == "R"
                    time.sleep(0.01)
                if not w.ready or w.proc.poll() is not None:
                    continue
                w.stats_reply = None
                w.send({"stats": 1})
                end = time.monotonic() + 10
                while w.stats_reply is None and time.monotonic() < end:
                    lines = w.read_lines()
                    if lines is None:
                        break
                    for line in lines:
                        if line.startswith("S "):
                            w.stats_reply = line[2:]
                    if w.stats_reply is None:
                        time.sleep(0.01)
                if w.stats_reply:
                    a, b = w.stats_reply.split()
                    out.append((int(a), int(b)))
            return out
