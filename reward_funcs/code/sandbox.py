"""Parent side of the code sandbox: choose an isolation backend, launch the supervisor, enforce deadlines, clean up.

Backends (see docs/code-sandbox.md for the threat model):

* ``ns-root`` / ``ns-user``: ``unshare`` (util-linux) gives new PID, mount, network, IPC and UTS namespaces (plus a
  user namespace when not root). The supervisor is PID 1 there and replaces the file system by a read-only skeleton
  with a tmpfs scratch; when it exits the kernel kills every process left in the namespace. Root: the candidate
  runs under a fresh unprivileged uid; user namespace: it keeps the uid but loses every capability.
* ``root`` (fallback, root without namespaces): fresh unprivileged uid per run, rlimits, kill-by-uid cleanup and
  removal of files that uid left in /tmp, /var/tmp, /dev/shm.
* ``user`` (fallback, no root, no namespaces): rlimits, subreaper-based cleanup, same uid as the trainer. Weak.

On every backend the candidate and the oracle run under a seccomp allow-list (`host.seccomp`: no network socket, no
SysV IPC, message queue, memfd or key, no namespace or mount call) and the parts of a run live in ``host/``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from .host import seccomp
from .host.paths import PREIMPORT, python_paths, stdlib_traversable
from .host.records import pump
from .host.scratch import count_user_procs, kill_uid, make_scratch, remove_tree, remove_uid_files
from .host.uids import UID_BASE as _UID_BASE  # noqa: F401 (tests draw uids above it)
from .host.uids import allocate_uids as _allocate_uids
from .host.uids import release_uids as _release_uids
from .sandboxed.os_calls import printable

_CHILD = (
    Path(__file__).with_name("sandboxed") / "__main__.py"
)  # run by path (stdlib only, never importing the package)
_lock = threading.Lock()
logger = logging.getLogger(__name__)
_backend_cache: dict[str, str] = {}
_fallback_reasons: dict[str, str] = {}  # isolation -> why namespaces were unavailable, when "auto" fell back


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run (per test for time, per process for memory/CPU)."""

    timeout_s: float = 4.0
    memory_mb: int = 1024
    file_mb: int = 16
    max_procs: int = 16  # processes+threads of the sandbox uid; worst-case memory is max_procs * memory_mb
    output_bytes: int = 4 << 20


class SandboxUnavailable(RuntimeError):
    """Requested isolation cannot be provided on this machine."""


def _launcher_cmd(backend: str, result_fd: int, site_packages: bool) -> list[str]:
    py = [sys.executable, "-I"] + ([] if site_packages else ["-S"]) + [str(_CHILD), "supervisor", str(result_fd)]
    if not backend.startswith("ns"):
        return py
    ns = [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount",
        "--net",
        "--ipc",
        "--uts",
        "--propagation",
        "private",
    ]
    if backend == "ns-user":
        ns += ["--user", "--map-root-user"]
    return ns + ["--"] + py


def resolve_backend(isolation: str = "auto", warn: bool = True) -> str:
    """Map ``isolation`` ("auto", "namespaces", "rlimits") to a working backend, probing once per process.

    ``"namespaces"`` never falls back: it raises `SandboxUnavailable` instead. ``"auto"`` falls back to rlimits
    and says so with a warning (``warn=False``: not here; see :func:`fallback_notice`) the first time it resolves.
    """
    isolation = os.environ.get("CODE_REWARD_ISOLATION", isolation) if isolation == "auto" else isolation
    if isolation not in ("auto", "namespaces", "rlimits"):
        raise ValueError(f"isolation must be 'auto', 'namespaces' or 'rlimits', not {isolation!r}")
    with _lock:
        if isolation in _backend_cache:
            return _backend_cache[isolation]
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable("the code sandbox needs Linux")
    root = os.geteuid() == 0
    backend = None
    why = ""
    if isolation in ("auto", "namespaces"):
        cand = "ns-root" if root else "ns-user"
        if shutil.which("unshare") is None:
            why = "the `unshare` program (util-linux) is not installed"
        else:
            why = _probe(cand)
            backend = cand if not why else None
        if backend is None and isolation == "namespaces":
            raise SandboxUnavailable(f"namespace isolation unavailable: {why}")
    if backend is None:
        backend = "root" if root else "user"
        problem = _probe(backend)
        if problem:
            raise SandboxUnavailable(f"cannot run the sandbox at all: {problem}")
        if isolation == "auto":
            with _lock:
                _fallback_reasons[isolation] = why
            if warn:
                warnings.warn(_fallback_message(backend, why), RuntimeWarning, stacklevel=3)
    with _lock:
        _backend_cache[isolation] = backend
    return backend


def _fallback_message(backend: str, why: str) -> str:
    return (
        f"reward_funcs code sandbox: Linux namespaces unavailable ({why}); falling back to rlimits"
        + (" + a separate uid" if backend == "root" else " under the trainer's own uid")
        + ". The seccomp allow-list still denies network sockets and kernel objects, but the candidate can read"
        + " world-readable files"
        + ("" if backend == "root" else ", write the user's files, kill the supervisor and may escape cleanup")
        + ". See docs/code-sandbox.md ('Getting real isolation')."
    )


def fallback_notice(isolation: str = "auto") -> str | None:
    """The fallback warning when ``isolation`` resolved to a weaker backend than namespaces, else None.

    >>> fallback_notice("rlimits") is None  # chosen, not a fallback
    True
    """
    backend = resolve_backend(isolation, warn=False)
    isolation = os.environ.get("CODE_REWARD_ISOLATION", isolation) if isolation == "auto" else isolation
    with _lock:
        why = _fallback_reasons.get(isolation)
    return None if why is None else _fallback_message(backend, why)


def _probe(backend: str) -> str:
    """Run a trivial job on ``backend``; return '' when it works, else the reason."""
    try:
        recs = run_job(
            {"mode": "calls", "code": "def f(x):\n    return x + 1", "cases": [{"fn": "f", "args": [41]}]},
            Limits(timeout_s=10),
            backend=backend,
        )
    except Exception as exc:  # any failure means "not this backend"
        return f"{type(exc).__name__}: {exc}"
    rec = recs.get(0, {})
    if rec.get("o") != "ok" or rec.get("v") != 42:
        return f"probe run failed: {rec.get('d') or rec or 'no result'}"
    return ""


def run_job(
    job: dict,
    limits: Limits,
    *,
    backend: str,
    site_packages: bool = False,
    on_record=None,
    startup_s: float = 15.0,
) -> dict[int, dict]:
    """Run one job (``mode`` "calls" or "stdio") in a fresh sandbox and return the supervisor's records by index.

    ``on_record(record) -> bool`` is called as records arrive; returning True stops the run early (the remaining
    tests get no record). The wall-clock backstop here is per record: ``timeout_s`` plus a grace period, on top of
    the supervisor's own per-test timer, so a wedged supervisor cannot stall training.
    """
    spec = _job_spec(job, limits, backend, site_packages)
    try:
        return _run_spec(spec, limits, backend, site_packages, on_record, startup_s)
    finally:
        if spec["uid"] is not None:
            _release_uids(spec["uid"])


def _run_spec(spec: dict, limits: Limits, backend: str, site_packages: bool, on_record, startup_s: float) -> dict:
    """Start the supervisor on ``spec``, collect its records, clean up (see :func:`run_job`)."""
    nonce, scratch = spec["nonce"], spec["scratch"]
    payload = json.dumps(spec).encode()
    r, w = os.pipe()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    records: dict[int, dict] = {}
    try:
        proc = subprocess.Popen(
            _launcher_cmd(backend, w, site_packages),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(w,),
            env=env,
            start_new_session=True,
        )
    except BaseException:
        os.close(r)
        os.close(w)
        remove_tree(scratch)
        raise
    os.close(w)
    stderr = bytearray()
    started = False
    try:
        started = pump(proc, r, payload, records, stderr, nonce, limits.timeout_s, on_record, startup_s)
    finally:
        os.close(r)
        _finish(proc, backend, spec["uid"], scratch)
    # Once a solution process started, a supervisor that died may have been killed by it (the `user` fallback
    # shares its uid): the tests without a record are that solution's failures, never a sandbox failure.
    if not started and proc.returncode not in (0, None):
        # Printable only: a candidate must not be able to write terminal escapes or fake log lines through it.
        raise RuntimeError(
            f"sandbox supervisor failed (exit {proc.returncode}): {printable(stderr.decode(errors='replace'), 2000)}"
        )
    return records


def _job_spec(job: dict, limits: Limits, backend: str, site_packages: bool) -> dict:
    """What the supervisor reads on stdin: the job plus a fresh nonce, uid and scratch directory (made here) and the
    limits, the paths the isolated file system must show and the modules to import before privileges drop."""
    nonce = secrets.token_hex(16)
    syscalls = base64.b64encode(seccomp.filter_bpf()).decode()  # raises when libseccomp is missing: no unfiltered run
    uid = _allocate_uids() if backend in ("root", "ns-root") else None
    try:
        scratch, workdir, oracle_dir = make_scratch(backend, uid)
    except BaseException:
        if uid is not None:
            _release_uids(uid)
        raise
    spec = dict(job)
    spec.update(
        nonce=nonce,
        backend=backend,
        uid=uid,
        oracle_uid=None if uid is None else uid + 1,
        scratch=scratch,
        workdir=workdir,
        oracle_dir=oracle_dir,
        limits={**asdict(limits), "nproc": _nproc(backend, limits.max_procs, job["mode"]), "seccomp": syscalls},
        python_paths=python_paths(site_packages),
        preimport=list(PREIMPORT) if backend == "root" and not stdlib_traversable() else [],
    )
    return spec


def _nproc(backend: str, max_procs: int, mode: str) -> int:
    """``RLIMIT_NPROC`` for the run's processes, so that the solution gets ``max_procs`` processes and threads.

    The kernel counts the tasks of a uid, and in a user namespace (Linux 5.14 and later) those of the namespace's
    uid. The root backends give the solution a uid of its own. Elsewhere the supervisor and, in program mode, the
    oracle count with it, and so do `unshare` (``ns-user``) and, where the uid is the trainer's (the `user` fallback,
    ``ns-user`` before 5.14), the trainer's processes as they are now.
    """
    if backend not in ("user", "ns-user"):
        return max_procs
    shared = 1 + (mode == "program") + (backend == "ns-user")
    if backend == "user" or _kernel() < (5, 14):
        shared += count_user_procs(os.getuid())
    return max_procs + shared


def _kernel() -> tuple[int, int]:
    try:
        major, minor = platform.release().split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def _finish(proc: subprocess.Popen, backend: str, uid: int, scratch: str) -> None:
    """Make sure nothing of this run survives: supervisor, candidate processes, files."""
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None:
        # ns backends: killing `unshare` makes its child (PID 1) die, which kills the whole namespace.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    if proc.stdin and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except OSError:
            pass
    proc.stderr.close()
    try:
        if uid is not None:
            for run_uid in (uid, uid + 1):  # normally a no-op: verifies that no process of the run's uids is left
                kill_uid(run_uid)
        if backend == "root":
            remove_uid_files((uid, uid + 1))
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("code sandbox: cleanup after a run failed: %s", exc)
    remove_tree(scratch)
