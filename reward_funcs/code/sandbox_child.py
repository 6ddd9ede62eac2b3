"""Sandbox supervisor and test runner, started by the parent as ``python -I -S sandbox_child.py RESULT_FD``.

Standard library only: it is started by path with ``-I`` and must not import the package (nor can it, once the
file system is replaced). Two roles live in this file because the candidate process is a ``fork`` of the
supervisor (no second interpreter start):

* the **supervisor** reads the job from stdin, builds the isolated file system (namespace backends), then for each
  run forks a **candidate** process, feeds it, enforces the per-test wall time, kills every candidate process when a
  run ends, and writes one record per test to ``RESULT_FD``. Only the supervisor holds ``RESULT_FD``: the candidate
  process closes it before any candidate code runs and runs under another uid (root backends), so records on that
  channel are the supervisor's, never the candidate's;
* the **candidate** process drops privileges, applies rlimits, runs the submitted code, and reports the values it
  computed on its own pipe. Those reports are *claims*: the parent compares them with expected values that never
  enter this process tree, so a forged claim is no better than a wrong answer;
* in ``program`` mode (test programs that cannot be split into probes, e.g. asserts inside loops) a second forked
  process, the **oracle**, runs only the test program; its solution names are stubs that send plain-data arguments
  to the candidate process (a call server) and rebuild its plain-data answers. The verdict is the oracle's, reported
  on a pipe only the oracle and the supervisor hold; the oracle is not dumpable, so a candidate running under the
  same uid can neither read its memory nor reach its file descriptors, only kill it (a failure).

The parent side (``sandbox.py``, ``runner.py``) imports this module only for the plain-data codec (``encode_value``,
``decode_value``).
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import resource
import select
import signal
import sys
import time

# Exact builtin types snapshotted at import time, before any candidate code runs in this interpreter.
_EXACT_SCALARS = (type(None), bool, str)

MAX_DEPTH = 64
MAX_NODES = 200_000

# prctl / mount constants (linux/prctl.h, linux/mount.h, linux/capability.h).
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_ST_FLAG_TO_MS = {2: _MS_NOSUID, 4: _MS_NODEV, 8: _MS_NOEXEC}  # statvfs f_flag bits -> mount flags (locked in userns)

_libc = ctypes.CDLL(None, use_errno=True)


# --------------------------------------------------------------------------------------------------------------
# Plain-data codec. Values cross the process boundary as JSON with tags for the types JSON lacks, so that the
# parent only ever compares builtin values it rebuilt itself (no candidate-defined __eq__ can take part).
# --------------------------------------------------------------------------------------------------------------


class NotPlainData(TypeError):
    """Raised for values that are not plain data (custom classes, generators, ...)."""


def encode_value(value, _depth: int = 0, _budget: list | None = None):
    """Encode plain data as JSON-compatible structures; subclasses of builtins are reduced to the base value.

    >>> encode_value((1, [2.5, None], {"a": {3}}))
    {'$': 'tuple', 'v': [1, [2.5, None], {'$': 'dict', 'v': [['a', {'$': 'set', 'v': [3]}]]}]}
    """
    budget = _budget if _budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or _depth > MAX_DEPTH:
        raise NotPlainData("value too large or too deeply nested")
    t = type(value)
    if t in _EXACT_SCALARS:
        return value
    # Unbound base-class slots return the exact builtin value and ignore any override on a subclass
    # (an int subclass with __eq__ = lambda *a: True becomes the plain int it wraps).
    if isinstance(value, int):
        v = int.__int__(value)
        return v if -(2**53) < v < 2**53 else {"$": "int", "v": int.__format__(v, "x")}
    if isinstance(value, float):
        v = float.__float__(value)
        return v if math.isfinite(v) else {"$": "float", "v": float.__repr__(v)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        v = complex.__complex__(value)
        return {"$": "complex", "v": [encode_value(v.real), encode_value(v.imag)]}
    if isinstance(value, (bytes, bytearray)):
        return {"$": "bytes", "v": bytes(value).hex()}
    nxt = _depth + 1
    if isinstance(value, list):
        return [encode_value(x, nxt, budget) for x in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode_value(x, nxt, budget) for x in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"$": "frozenset", "v": [encode_value(x, nxt, budget) for x in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"$": "set", "v": [encode_value(x, nxt, budget) for x in set.__iter__(value)]}
    if isinstance(value, dict):
        items = dict.items(value)
        return {"$": "dict", "v": [[encode_value(k, nxt, budget), encode_value(v, nxt, budget)] for k, v in items]}
    module = getattr(t, "__module__", "") or ""
    if module.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return encode_value(value.tolist(), nxt, budget)  # numpy scalars and arrays become Python data
    raise NotPlainData(f"return value of type {t.__name__!r} is not plain data")


def decode_value(obj, _depth: int = 0):
    """Inverse of :func:`encode_value`; raises ``ValueError`` on anything malformed.

    >>> decode_value({"$": "tuple", "v": [1, {"$": "frozenset", "v": [2]}]})
    (1, frozenset({2}))
    """
    if _depth > MAX_DEPTH + 1:
        raise ValueError("too deep")
    t = type(obj)
    if obj is None or t in (bool, int, float, str):
        return obj
    if t is list:
        return [decode_value(x, _depth + 1) for x in obj]
    if t is not dict or set(obj) != {"$", "v"}:
        raise ValueError("malformed value")
    tag, v = obj["$"], obj["v"]
    if tag == "int" and type(v) is str:
        return int(v, 16)
    if tag == "float" and v in ("nan", "inf", "-inf"):
        return float(v)
    if tag == "bytes" and type(v) is str:
        return bytes.fromhex(v)
    if type(v) is not list:
        raise ValueError("malformed value")
    items = [decode_value(x, _depth + 1) for x in v]
    if tag == "complex" and len(items) == 2 and all(type(x) is float or type(x) is int for x in items):
        return complex(items[0], items[1])
    if tag == "tuple":
        return tuple(items)
    if tag == "set":
        return set(items)
    if tag == "frozenset":
        return frozenset(items)
    if tag == "dict" and all(type(p) is list and len(p) == 2 for p in items):
        return {k: val for k, val in items}
    raise ValueError(f"unknown tag {tag!r}")


# --------------------------------------------------------------------------------------------------------------
# Small OS helpers
# --------------------------------------------------------------------------------------------------------------


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s):
        return None if s is None else s.encode()

    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _proc_ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --------------------------------------------------------------------------------------------------------------
# Supervisor
# --------------------------------------------------------------------------------------------------------------


class _Supervisor:
    def __init__(self, spec: dict, result_fd: int) -> None:
        self.spec = spec
        self.result_fd = result_fd
        self.nonce = spec["nonce"]
        self.backend = spec["backend"]  # "ns-root" | "ns-user" | "root" | "user"
        self.uid = spec.get("uid")
        self.limits = spec["limits"]
        self.devnull = os.open(os.devnull, os.O_RDWR)

    # -- result channel ------------------------------------------------------------------------------------
    def emit(self, record: dict) -> None:
        record["nonce"] = self.nonce
        _write_all(self.result_fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    # -- file system ---------------------------------------------------------------------------------------
    def build_root(self) -> None:
        """Replace the visible file system by a read-only skeleton: system and Python dirs, /dev nodes, fresh /proc,
        and a size-limited tmpfs scratch at /tmp. Everything lives in this mount namespace and vanishes with it."""
        new = self.spec["scratch"]  # an empty directory made by the parent: mount point for the new root tmpfs
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
        binds = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"]
        binds += [os.path.realpath(p) for p in self.spec["python_paths"]]
        done: list[str] = []
        for src in binds:
            if not os.path.lexists(src) or any(src == d or src.startswith(d + "/") for d in done):
                continue
            dst = new + src
            if os.path.islink(src) and os.path.dirname(src) == "/":
                os.symlink(os.readlink(src), dst)  # merged-/usr layouts: /bin -> usr/bin
                continue
            if not os.path.isdir(src):
                continue
            os.makedirs(dst, exist_ok=True)
            _mount(src, dst, None, _MS_BIND | _MS_REC)
            locked = sum(ms for st, ms in _ST_FLAG_TO_MS.items() if os.statvfs(src).f_flag & st)
            _mount(None, dst, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | locked)
            done.append(src)
        os.makedirs(new + "/dev")
        for name in ("null", "zero", "full", "random", "urandom"):
            open(f"{new}/dev/{name}", "w").close()
            _mount(f"/dev/{name}", f"{new}/dev/{name}", None, _MS_BIND)
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
            ("shm", "/tmp"),
        ):
            os.symlink(target, f"{new}/dev/{name}")
        os.makedirs(new + "/proc")
        _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        os.makedirs(new + "/tmp")
        size = int(self.limits["file_mb"]) * 2 + 1
        _mount("tmpfs", new + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size}m,mode=1777")
        _mount(None, new, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.chroot(new)
        os.chdir("/tmp")

    # -- candidate process control -------------------------------------------------------------------------
    def kill_candidates(self) -> None:
        """SIGKILL every candidate process, including setsid/double-forked descendants, then reap zombies."""
        for _ in range(200):
            victims = self._candidate_pids()
            if not victims:
                break
            if self.backend in ("root", "ns-root"):
                self._kill_uid()  # kill(-1) as the sandbox uid: atomic w.r.t. fork, reaches every process of it
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.001)
            _reap_zombies()
        _reap_zombies()

    def _candidate_pids(self) -> list[int]:
        me = os.getpid()
        if self.backend.startswith("ns"):
            return [p for p in _pids() if p != me]  # we are PID 1: everything else in the namespace is the candidate's
        if self.backend == "root":
            return [p for p in _pids() if p != me and _proc_uid(p) == self.uid]
        # "user": we are a child subreaper, so orphaned descendants are re-parented to us.
        return [p for p in _pids() if p != me and _proc_ppid(p) == me]

    def _kill_uid(self) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                os.setresgid(self.uid, self.uid, self.uid)
                os.setresuid(self.uid, self.uid, self.uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    def spawn(self, stdin_fd: int, stdout_fd: int, report_w: int, cpu_s: int) -> int:
        pid = os.fork()
        if pid != 0:
            return pid
        try:
            _become_candidate(self, stdin_fd, stdout_fd, report_w, cpu_s)
        except BaseException:
            os._exit(70)
        return 0  # the caller runs the candidate code

    # -- runs ---------------------------------------------------------------------------------------------
    def run_calls(self) -> None:
        """Call-based and assert-style probes: one candidate process runs them in order; after a timeout or crash a
        fresh candidate process (re-running the solution module) continues with the next probe."""
        cases = self.spec["cases"]
        timeout = float(self.limits["timeout_s"])
        k = 0
        while k < len(cases):
            r, w = os.pipe()
            cpu = int(math.ceil(timeout * (len(cases) - k + 1))) + 1
            pid = self.spawn(self.devnull, self.devnull, w, cpu)
            if pid == 0:
                _candidate_calls(self.spec, k, 3)  # never returns
            os.close(w)
            k = self._collect_calls(pid, r, k, cases, timeout)
            os.close(r)
            self.kill_candidates()

    def _collect_calls(self, pid: int, r: int, k: int, cases: list, timeout: float) -> int:
        """Read the candidate's reports; return the index of the next probe to run in a fresh process."""
        buf = b""
        loaded = False
        deadline = time.monotonic() + timeout
        cap = int(self.limits["output_bytes"])
        pidfd = os.pidfd_open(pid)
        watch = [r, pidfd]
        status = None
        try:
            while True:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    self.kill_candidates()
                    if not loaded:
                        self._fail_rest(k, "timeout", "solution module did not finish loading in time")
                        return len(cases)
                    self.emit({"k": k, "o": "timeout", "d": f"no result within {timeout:g} s"})
                    return k + 1
                # Once the process has exited only buffered data is left: poll without blocking, since a
                # descendant may still hold the write end of the pipe open.
                ready, _, _ = select.select(watch, [], [], 0 if status is not None else min(wait, 0.5))
                if not ready and status is None:
                    _reap_zombies_except(pid)
                    continue
                if pidfd in ready:
                    status = _wait_status(pid)
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
                    self.kill_candidates()
                    self.emit({"k": k, "o": "error", "d": "result larger than the output limit"})
                    return k + 1
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        rec = json.loads(line)
                        rk, outcome = rec["k"], rec["o"]
                    except (ValueError, KeyError, TypeError):
                        self.kill_candidates()
                        self.emit({"k": k, "o": "error", "d": "malformed report from the candidate process"})
                        return k + 1
                    if not loaded:
                        if rk != -1 or outcome not in ("loaded", "error", "memory"):
                            self.kill_candidates()
                            self._fail_rest(k, "error", "protocol violation while loading")
                            return len(cases)
                        if outcome != "loaded":
                            self._fail_rest(k, outcome, str(rec.get("d", ""))[:500])
                            return len(cases)
                        loaded = True
                        deadline = time.monotonic() + timeout
                        continue
                    if rk != k or outcome not in ("ok", "error", "memory"):
                        self.kill_candidates()
                        self.emit({"k": k, "o": "error", "d": "protocol violation"})
                        return k + 1
                    out = {"k": k, "o": outcome, "d": str(rec.get("d", ""))[:500]}
                    if outcome == "ok":
                        out["v"] = rec.get("v")
                    self.emit(out)
                    k += 1
                    if k == len(cases):
                        return k
                    deadline = time.monotonic() + timeout
                if status is not None and not chunk:
                    # Exited (or closed its report pipe and exited) before reporting the current probe.
                    if not loaded:
                        self._fail_rest(k, "error", f"solution module did not load ({status})")
                        return len(cases)
                    self.emit({"k": k, "o": _dead_outcome(status), "d": f"process ended before reporting ({status})"})
                    return k + 1
        finally:
            os.close(pidfd)

    def run_program(self) -> None:
        """One test program, all or nothing: the candidate process serves calls, the oracle process runs the tests."""
        timeout = float(self.limits["timeout_s"])
        cpu = int(math.ceil(timeout)) + 1
        req_r, req_w = os.pipe()  # oracle -> candidate: calls
        resp_r, resp_w = os.pipe()  # candidate -> oracle: answers
        cand = self.spawn(req_r, self.devnull, resp_w, cpu)
        if cand == 0:
            _candidate_server(self.spec["code"])  # never returns
        rep_r, rep_w = os.pipe()  # oracle -> supervisor: made after the candidate exists, so it never held it
        oracle = self.spawn(resp_r, req_w, rep_w, cpu)
        if oracle == 0:
            _oracle_program(self.spec, int(self.limits["output_bytes"]))  # never returns
        for fd in (req_r, req_w, resp_r, resp_w, rep_w):
            os.close(fd)
        rec = self._collect_program(oracle, rep_r, timeout)
        os.close(rep_r)
        self.kill_candidates()
        rec["k"] = 0
        self.emit(rec)

    def _collect_program(self, pid: int, r: int, timeout: float) -> dict:
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
                    self.kill_candidates()
                    what = "the tests did not finish" if loaded else "the solution module did not finish loading"
                    return {"o": "timeout", "d": f"{what} within {timeout:g} s"}
                watch = [r] if status is not None else [r, pidfd]
                ready, _, _ = select.select(watch, [], [], 0 if status is not None else min(wait, 0.5))
                if not ready and status is None:
                    _reap_zombies_except(pid)
                    continue
                if pidfd in ready:
                    status = _wait_status(pid)
                    os.set_blocking(r, False)
                try:
                    chunk = os.read(r, 1 << 16) if (r in ready or status is not None) else b""
                except BlockingIOError:
                    chunk = b""
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        rec = json.loads(line)
                        outcome = rec["o"]
                    except (ValueError, KeyError, TypeError):
                        return {"o": "error", "d": "malformed report from the test process"}
                    if outcome == "loaded" and not loaded:
                        loaded = True
                        deadline = time.monotonic() + timeout
                        continue
                    if outcome not in ("ok", "error", "memory"):
                        return {"o": "error", "d": "protocol violation"}
                    return {"o": outcome, "v": rec.get("v") is True, "d": str(rec.get("d", ""))[:500]}
                if status is not None and not chunk:
                    return {"o": "error", "d": f"the test process ended without a verdict ({status})"}
        finally:
            os.close(pidfd)

    def _fail_rest(self, k: int, outcome: str, detail: str) -> None:
        for i in range(k, len(self.spec["cases"])):
            self.emit({"k": i, "o": outcome, "d": detail})

    def run_stdio(self) -> None:
        """stdin/stdout cases: a fresh candidate process per case, stdin from a memfd holding the case input."""
        timeout = float(self.limits["timeout_s"])
        cap = int(self.limits["output_bytes"])
        for k, data in enumerate(self.spec["inputs"]):
            mem = os.memfd_create("stdin", 0)
            _write_all(mem, data.encode())
            os.lseek(mem, 0, os.SEEK_SET)
            out_r, out_w = os.pipe()
            rep_r, rep_w = os.pipe()
            pid = self.spawn(mem, out_w, rep_w, int(math.ceil(timeout)) + 1)
            if pid == 0:
                _candidate_stdio(self.spec["code"])  # never returns
            for fd in (mem, out_w, rep_w):
                os.close(fd)
            rec = self._collect_stdio(pid, out_r, rep_r, timeout, cap)
            for fd in (out_r, rep_r):
                os.close(fd)
            self.kill_candidates()
            rec["k"] = k
            self.emit(rec)
            if rec.get("syntax"):
                for i in range(k + 1, len(self.spec["inputs"])):
                    self.emit({"k": i, "o": "error", "d": rec["d"]})
                return

    def _collect_stdio(self, pid: int, out_r: int, rep_r: int, timeout: float, cap: int) -> dict:
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
                    self.kill_candidates()
                    return {"o": "timeout", "d": f"no exit within {timeout:g} s", "out": ""}
                ready, _, _ = select.select([f for f in fds if f is not None], [], [], wait)
                if out_r in ready:
                    chunk = os.read(out_r, 1 << 16)
                    if chunk:
                        out += chunk
                        if len(out) > cap:
                            self.kill_candidates()
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
                    status = _wait_status(pid)
                    break
            # The process has exited; descendants may still hold the pipe: collect what is buffered, then kill them.
            self.kill_candidates()
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
        rec = {"o": _dead_outcome(status), "d": detail[:500], "out": text}
        if claim.startswith("error SyntaxError"):
            rec["syntax"] = True
        return rec


def _reap_zombies_except(pid: int) -> None:
    """Reap orphans re-parented to us (PID 1 / subreaper) without consuming the exit status of ``pid``."""
    for p in _pids():
        if p != pid and p != os.getpid() and _proc_ppid(p) == os.getpid():
            try:
                with open(f"/proc/{p}/stat", "rb") as f:
                    data = f.read()
                if data[data.rindex(b")") + 2 : data.rindex(b")") + 3] == b"Z":
                    os.waitpid(p, os.WNOHANG)
            except (OSError, ValueError, ChildProcessError):
                pass


def _wait_status(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "gone"
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


def _dead_outcome(status: str) -> str:
    if status in ("signal SIGXCPU",):
        return "timeout"
    return "error"


# --------------------------------------------------------------------------------------------------------------
# Candidate side (runs in the forked process; never returns)
# --------------------------------------------------------------------------------------------------------------


def _become_candidate(sup: _Supervisor, stdin_fd: int, stdout_fd: int, report_w: int, cpu_s: int) -> None:
    os.setsid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # Move the three fds we keep to 0/1/3 (stderr is discarded), closing everything else, notably RESULT_FD.
    keep = [os.dup(stdin_fd), os.dup(stdout_fd), os.dup(report_w)]
    os.dup2(keep[0], 0)
    os.dup2(keep[1], 1)
    os.dup2(sup.devnull, 2)
    os.dup2(keep[2], 3)
    os.closerange(4, 1 << 16)
    lim = sup.limits
    mb = 1 << 20
    for res, value in (
        (resource.RLIMIT_AS, int(lim["memory_mb"]) * mb),
        (resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
        (resource.RLIMIT_FSIZE, int(lim["file_mb"]) * mb),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, int(lim["nproc"])),
    ):
        resource.setrlimit(res, value if isinstance(value, tuple) else (value, value))
    if sup.backend in ("root", "ns-root"):
        os.setgroups([])
        os.setresgid(sup.uid, sup.uid, sup.uid)
        os.setresuid(sup.uid, sup.uid, sup.uid)
    elif sup.backend == "ns-user":
        _drop_capabilities()
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError("no_new_privs")
    if sup.backend in ("root", "user"):
        os.chdir(sup.spec["scratch"])
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": os.getcwd(),
            "TMPDIR": os.getcwd(),
            "OMP_NUM_THREADS": "1",
        }
    )


def _drop_capabilities() -> None:
    """User-namespace backend: the candidate shares the supervisor's uid, so drop every capability for good."""
    _libc.prctl(
        _PR_SET_SECUREBITS, ctypes.c_ulong(0x2F), 0, 0, 0
    )  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED (+locks)
    for cap in range(64):
        _libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)
    _libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset")


_MEMORY_LOADING = b'{"k":-1,"o":"memory","d":"MemoryError while loading"}\n'


def _report(fd: int, rec: dict) -> None:
    try:
        _write_all(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    except BaseException:
        os._exit(71)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _resolve_callable(g: dict, name: str):
    fn = g.get(name)
    if callable(fn):
        return fn
    cls = g.get("Solution")  # LeetCode style: class Solution with the method
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    raise NameError(f"no function or Solution method named {name!r}")


def _candidate_calls(spec: dict, start: int, rep: int) -> None:
    import builtins

    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    failure = None
    try:
        exec(compile(spec["code"], "<solution>", "exec"), g)
        for src in spec.get("setup", ()):
            exec(compile(src, "<test>", "exec"), g)
    except MemoryError:
        failure = "memory"  # reported below, once the traceback (and the memory it pins) is gone
    except BaseException as exc:  # SystemExit included: leaving early is not a pass
        failure = _describe(exc)
    if failure is not None:
        g.clear()
        if failure == "memory":
            _write_all(rep, _MEMORY_LOADING)
        else:
            _report(rep, {"k": -1, "o": "error", "d": failure})
        os._exit(0)
    _report(rep, {"k": -1, "o": "loaded"})
    for k in range(start, len(spec["cases"])):
        case = spec["cases"][k]
        rec = None
        try:
            if "expr" in case:
                for name, enc in case.get("bind", {}).items():
                    g[name] = decode_value(enc)
                value = eval(compile(case["expr"], "<test>", "eval"), g)
                if case.get("truth"):
                    value = bool(value)
            else:
                value = _resolve_callable(g, case["fn"])(*decode_value(case["args"]))
            rec = {"k": k, "o": "ok", "v": encode_value(value)}
            value = None
        except MemoryError:
            pass
        except BaseException as exc:
            rec = {"k": k, "o": "error", "d": _describe(exc)}
        if rec is None:
            value = None
            rec = {"k": k, "o": "memory", "d": "MemoryError"}
        _report(rep, rec)
    os._exit(0)  # skip atexit handlers and non-daemon threads: every result is already reported


def _candidate_server(code: str) -> None:
    """Program mode, candidate side: load the solution, then answer calls ``{"fn", "a", "kw"}`` read from a private
    copy of fd 0 with ``{"o": "ok", "v"}`` or ``{"o": "raise", "t", "d"}`` on fd 3. Only the return value goes back:
    changes the solution makes to its arguments stay here, so it cannot rewrite a test's expected value through an
    argument. Leaving (``SystemExit``, ``os._exit``) ends the conversation, which the oracle reports as a failure."""
    import builtins

    requests = os.dup(0)
    os.dup2(2, 0)  # the solution reads an empty stdin
    g: dict = {"__name__": "__main__", "__builtins__": builtins}
    failure = None
    try:
        exec(compile(code, "<solution>", "exec"), g)
    except MemoryError:
        failure = "memory"
    except BaseException as exc:  # SystemExit included: leaving early is not a pass
        failure = _describe(exc)
    if failure is not None:
        g.clear()
        _report(3, {"k": -1, "o": "memory" if failure == "memory" else "error", "d": failure})
        os._exit(0)
    _report(3, {"k": -1, "o": "loaded"})
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
            rec = {"o": "ok", "v": encode_value(value)}
            value = None
        except MemoryError:
            pass
        except Exception as exc:
            rec = {"o": "raise", "t": type(exc).__name__, "d": _describe(exc)}
        except BaseException:
            os._exit(0)
        _report(3, rec if rec is not None else {"o": "memory", "d": "MemoryError"})


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


def _oracle_program(spec: dict, cap: int) -> None:
    """Program mode, test side: run the test program with stubs for the solution's names; report the verdict on
    fd 3 (``{"o": "ok", "v": true}`` only when the program ran to its end and called the solution)."""
    import builtins

    answers, calls = os.dup(0), os.dup(1)
    os.dup2(2, 0)  # the tests' own input/print go nowhere, never into the call channel
    os.dup2(2, 1)
    _prctl(_PR_SET_DUMPABLE, 0)  # a same-uid candidate cannot ptrace us or open /proc/<us>/fd
    buf = bytearray()

    def finish(rec: dict) -> None:
        _report(3, rec)
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
        except ValueError:
            finish({"o": "error", "d": "malformed answer from the solution process"})

    first = answer()
    if first.get("o") != "loaded":
        outcome = "memory" if first.get("o") == "memory" else "error"
        finish({"o": outcome, "d": "solution did not load: " + str(first.get("d", ""))[:300]})
    _report(3, {"o": "loaded"})
    ncalls = [0]

    def stub_for(name: str):
        def stub(*args, **kwargs):
            try:
                payload = {"fn": name, "a": encode_value(list(args)), "kw": encode_value(dict(kwargs))}
            except NotPlainData as exc:
                raise TypeError(f"cannot pass to the solution: {exc}") from None
            ncalls[0] += 1
            try:
                _write_all(calls, (json.dumps(payload, separators=(",", ":")) + "\n").encode())
            except OSError:
                finish({"o": "error", "d": "the solution process ended (or left)"})
            rec = answer()
            if rec["o"] == "memory":
                finish({"o": "memory", "d": "MemoryError in the solution"})
            if rec["o"] == "raise":
                raise _rebuilt_exception(rec.get("t", ""), str(rec.get("d", ""))[:300])
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
    for name in spec["names"]:
        g[name] = stub_for(name)
    try:
        exec(compile(spec["test"], "<tests>", "exec"), g)
    except MemoryError:
        finish({"o": "memory", "d": "MemoryError in the tests"})
    except BaseException as exc:  # a failed assert, or an error of (or re-raised from) the solution
        finish({"o": "ok", "v": False, "d": _describe(exc)})
    if ncalls[0] == 0:
        finish({"o": "ok", "v": False, "d": "the tests never called the solution"})
    finish({"o": "ok", "v": True})


def _candidate_stdio(code: str) -> None:
    import io

    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    import builtins

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
        os.write(3, f"error {type(exc).__name__}\n".encode())
        status = 1
    if memory:  # outside the except block: the traceback no longer pins the memory
        g.clear()
        os.write(3, b"memory\n")
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


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    result_fd = int(argv[1])
    os.set_inheritable(result_fd, False)
    spec = json.loads(_read_all(0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sup = _Supervisor(spec, result_fd)
    # Not dumpable: a same-uid candidate (user backends) cannot ptrace us or open /proc/<us>/fd/RESULT_FD.
    _prctl(_PR_SET_DUMPABLE, 0)
    if sup.backend.startswith("ns"):
        sup.build_root()
    else:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        for mod in spec.get("preimport", ()):  # stdlib behind a directory the sandbox uid cannot traverse
            try:
                __import__(mod)
            except Exception:
                pass
    if spec["mode"] == "stdio":
        sup.run_stdio()
    elif spec["mode"] == "calls":
        sup.run_calls()
    elif spec["mode"] == "program":
        sup.run_program()
    sup.kill_candidates()
    sup.emit({"k": -1, "o": "end"})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            sys.exit(0)
        raise
