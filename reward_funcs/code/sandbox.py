"""Parent side of the code sandbox: choose an isolation backend, launch the supervisor, enforce deadlines, clean up.

Backends (see docs/code-sandbox.md for the threat model):

* ``ns-root`` / ``ns-user``: ``unshare`` (util-linux) gives new PID, mount, network, IPC and UTS namespaces (plus a
  user namespace when not root). The supervisor is PID 1 there and replaces the file system by a read-only skeleton
  with a tmpfs scratch; when it exits the kernel kills every process left in the namespace. Root: the candidate
  runs under a fresh unprivileged uid; user namespace: it keeps the uid but loses every capability.
* ``root`` (fallback, root without namespaces): fresh unprivileged uid per run, rlimits, kill-by-uid cleanup and
  removal of files that uid left in /tmp, /var/tmp, /dev/shm. No network isolation.
* ``user`` (fallback, no root, no namespaces): rlimits, subreaper-based cleanup, same uid as the trainer. Weak.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from .sandboxed.os_calls import printable

_CHILD = (
    Path(__file__).with_name("sandboxed") / "__main__.py"
)  # run by path (stdlib only, never importing the package)
_UID_BASE = 0x5C000000  # far above any real account; two fresh uids (candidate, oracle) per concurrent run
_UID_SLOTS = 1 << 16  # uid pairs, drawn at random and held by a lock on one byte of a machine-wide lock file
_UID_LOCK_FILE = "/tmp/code-sandbox-uids.lock"  # fixed (not the temp dir): every trainer on the machine uses it
_SCRATCH_PREFIX = "code-sandbox-"
_lock = threading.Lock()
_uid_lock: dict[str, int] = {}  # "fd", "pid": the lock file as opened by this process (record locks are per process)
_slots_in_use: set[int] = set()  # record locks do not exclude the threads of one process from each other
_swept: set[str] = set()  # temp folders already cleared of stale scratch by this process
logger = logging.getLogger(__name__)
_backend_cache: dict[str, str] = {}
_fallback_reasons: dict[str, str] = {}  # isolation -> why namespaces were unavailable, when "auto" fell back

# Common stdlib modules imported before dropping privileges when the interpreter's stdlib sits behind a directory the
# sandbox uid cannot traverse (e.g. pyenv under /root) in the ``root`` fallback.
_PREIMPORT = (
    "collections",
    "heapq",
    "bisect",
    "itertools",
    "functools",
    "math",
    "cmath",
    "re",
    "string",
    "random",
    "decimal",
    "fractions",
    "statistics",
    "typing",
    "dataclasses",
    "copy",
    "operator",
    "datetime",
    "array",
    "queue",
    "threading",
    "io",
    "struct",
    "textwrap",
    "unicodedata",
    "hashlib",
    "enum",
    "abc",
    "numbers",
)


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


def _python_paths(site_packages: bool) -> list[str]:
    """The folders the namespace backends show read-only: the Python install, and with ``site_packages`` the
    environment and its package folders, never the other entries of ``sys.path`` (the script's folder, the working
    directory, a source checkout on an editable install), which can hold the datasets and their tests."""
    paths = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    if site_packages:
        paths.add(sys.prefix)
        paths.update(p for p in sys.path if _is_package_folder(p))
    return sorted(paths)


def _is_package_folder(path: str) -> bool:
    """A ``site-packages`` / ``dist-packages`` folder, or a folder inside the Python install or the environment."""
    if not path or not os.path.isdir(path):
        return False
    real = os.path.realpath(path)
    if os.path.basename(real) in ("site-packages", "dist-packages"):
        return True
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return any(real == p or real.startswith(p + os.sep) for p in prefixes)


def _stdlib_traversable() -> bool:
    """True when every directory above the stdlib is world-searchable (the ``root`` fallback needs it)."""
    path = Path(os.__file__).resolve().parent
    for parent in [path, *path.parents]:
        try:
            if not parent.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _count_user_procs(uid: int) -> int:
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _procs_of_uid(uid: int) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(p))
                        break
        except OSError:
            pass
    return found


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (``kill(-1)`` issued as that uid reaches all of them at once)."""
    for _ in range(20):
        if not _procs_of_uid(uid):
            return
        code = f"import os\nos.setgroups([])\nos.setresgid({uid},{uid},{uid})\nos.setresuid({uid},{uid},{uid})\n"
        code += "os.kill(-1, 9)"
        subprocess.run([sys.executable, "-I", "-S", "-c", code], check=False, timeout=30)
        time.sleep(0.01)


def _remove_uid_files(uids: tuple[int, ...]) -> None:
    """``root`` fallback: drop what the sandbox uids wrote in the usual world-writable places."""
    for base in {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}:
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid not in uids:
                    continue
                if e.is_dir(follow_symlinks=False):
                    remove_tree(e.path)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def remove_tree(path: str) -> None:
    """Remove a folder the candidate wrote in, whatever it made there; never raises (a cleanup problem must not turn
    a verdict into no verdict). ``rm -rf`` walks any depth, where ``shutil.rmtree`` recurses once per level (3000
    nested folders raised ``RecursionError``); folders the candidate made unreadable get their owner's rights back."""
    if _remove_empty(path):
        return
    try:
        for cmd in (["rm", "-rf", "--one-file-system", "--", path], ["chmod", "-R", "u+rwx", "--", path]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
            if not os.path.lexists(path):
                return
        subprocess.run(["rm", "-rf", "--one-file-system", "--", path], stderr=subprocess.DEVNULL, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("code sandbox: could not remove %s: %s", path, exc)


def _remove_empty(path: str) -> bool:
    """Remove ``path`` when it holds nothing but empty folders (the usual case, without starting ``rm``)."""
    try:
        for sub in os.listdir(path):
            os.rmdir(os.path.join(path, sub))
        os.rmdir(path)
    except FileNotFoundError:
        return not os.path.lexists(path)
    except OSError:
        return False
    return True


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _sweep_stale_scratch(base: str) -> None:
    """Remove the scratch folders of trainers that died during a run (once per temp folder and process): a folder is
    named after its owner's pid and start time, and is stale when no such process runs any more."""
    with _lock:
        if base in _swept:
            return
        _swept.add(base)
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for e in entries:
        parts = e.name[len(_SCRATCH_PREFIX) :].split("-")
        if not e.name.startswith(_SCRATCH_PREFIX) or len(parts) < 3 or not parts[0].isdigit():
            continue
        try:
            mine = e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == os.geteuid()
        except OSError:
            continue
        if mine and _process_start(int(parts[0])) != parts[1]:
            remove_tree(e.path)


def _uid_lock_fd() -> int:
    """This process's handle on the machine-wide uid lock file (reopened after a fork: locks are per process)."""
    if _uid_lock.get("pid") != os.getpid():
        fd = os.open(_UID_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # planted by someone else: their locks, not ours
            os.close(fd)
            raise RuntimeError(f"{_UID_LOCK_FILE} is not a private file of this user")
        _uid_lock.update(fd=fd, pid=os.getpid())
    return _uid_lock["fd"]


def _allocate_uids() -> int:
    """A uid pair no other run on this machine holds: the first uid for the candidate, the next for the oracle.

    A random slot, locked (one byte of the lock file) until :func:`_release_uids`; the kernel drops the lock when
    the trainer dies, so a killed trainer never strands a slot.
    """
    fd = _uid_lock_fd()
    for _ in range(10_000):
        slot = secrets.randbelow(_UID_SLOTS)
        with _lock:
            if slot in _slots_in_use:
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            except OSError:
                continue  # another trainer's run holds it
            _slots_in_use.add(slot)
        return _UID_BASE + 2 * slot
    raise RuntimeError("no free sandbox uid")


def _release_uids(uid: int) -> None:
    slot = (uid - _UID_BASE) // 2
    with _lock:
        fcntl.lockf(_uid_lock_fd(), fcntl.LOCK_UN, 1, slot)
        _slots_in_use.discard(slot)


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
        + ". Network is NOT isolated and the candidate can read world-readable files"
        + ("" if backend == "root" else ", write the user's files and may escape cleanup")
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
    try:
        _pump(proc, r, payload, records, stderr, nonce, limits, on_record, startup_s)
    finally:
        os.close(r)
        _finish(proc, backend, spec["uid"], scratch)
    if not records and proc.returncode not in (0, None):
        # Printable only: a candidate must not be able to write terminal escapes or fake log lines through it.
        raise RuntimeError(
            f"sandbox supervisor failed (exit {proc.returncode}): {printable(stderr.decode(errors='replace'), 2000)}"
        )
    return records


def _job_spec(job: dict, limits: Limits, backend: str, site_packages: bool) -> dict:
    """What the supervisor reads on stdin: the job plus a fresh nonce, uid and scratch directory (made here) and the
    limits, the paths the isolated file system must show and the modules to import before privileges drop."""
    nonce = secrets.token_hex(16)
    uid = _allocate_uids() if backend in ("root", "ns-root") else None
    try:
        scratch, workdir, oracle_dir = _make_scratch(backend, uid)
    except BaseException:
        if uid is not None:
            _release_uids(uid)
        raise
    nproc = limits.max_procs
    if backend in ("user", "ns-user"):  # RLIMIT_NPROC counts every process of the (shared) uid
        nproc += _count_user_procs(os.getuid())
    spec = dict(job)
    spec.update(
        nonce=nonce,
        backend=backend,
        uid=uid,
        oracle_uid=None if uid is None else uid + 1,
        scratch=scratch,
        workdir=workdir,
        oracle_dir=oracle_dir,
        limits={**asdict(limits), "nproc": nproc},
        python_paths=_python_paths(site_packages),
        preimport=list(_PREIMPORT) if backend == "root" and not _stdlib_traversable() else [],
    )
    return spec


def _make_scratch(backend: str, uid: int | None) -> tuple[str, str, str]:
    """The run's scratch folder, named after this process (see :func:`_sweep_stale_scratch`), and the working folders
    of the candidate and of the oracle. Namespaces: the scratch is the mount point of the new root, the candidate
    works in its tmpfs ``/tmp`` and the oracle in a private tmpfs on ``/oracle``. Fallbacks: ``run`` and ``oracle`` in it, the oracle's closed to the candidate's
    uid (``root``; the ``user`` fallback has only one uid)."""
    base = tempfile.gettempdir()
    _sweep_stale_scratch(base)
    scratch = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-{_process_start(os.getpid())}-", dir=base)
    if backend.startswith("ns"):
        return scratch, "/tmp", "/oracle"
    workdir, oracle_dir = os.path.join(scratch, "run"), os.path.join(scratch, "oracle")
    os.mkdir(workdir, 0o700)
    os.mkdir(oracle_dir, 0o700)
    if uid is not None:
        os.chmod(scratch, 0o711)  # the sandbox uids may pass through, not list it
        os.chown(workdir, uid, uid)
        os.chown(oracle_dir, uid + 1, uid + 1)
    return scratch, workdir, oracle_dir


def _pump(proc, r, payload, records, stderr, nonce, limits, on_record, startup_s) -> None:
    sel = selectors.DefaultSelector()
    stdin_fd = proc.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    sel.register(stdin_fd, selectors.EVENT_WRITE, "in")
    sel.register(r, selectors.EVENT_READ, "res")
    sel.register(proc.stderr.fileno(), selectors.EVENT_READ, "err")
    # Between two supervisor records at most ~2 timeouts pass legitimately (a fresh candidate process re-loads the
    # solution module, then runs the next test), plus process start-up on a loaded machine.
    grace = 2 * limits.timeout_s + 5.0
    deadline = time.monotonic() + startup_s + grace
    sent = 0
    buf = b""
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return  # backstop: _finish kills the whole sandbox
            for key, _ in sel.select(timeout=left):
                if key.data == "in":
                    try:
                        sent += os.write(stdin_fd, payload[sent : sent + (1 << 16)])
                    except BrokenPipeError:
                        sent = len(payload)
                    if sent >= len(payload):
                        sel.unregister(stdin_fd)
                        proc.stdin.close()
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
                        return
                    rec["size"] = len(line)  # the parent's own field: what keeping this value would cost
                    if on_record is None:
                        records[rec["k"]] = rec
                        continue
                    # Keep the outcome only: values (up to output_bytes each) are the callback's to keep or drop.
                    records[rec["k"]] = {key: v for key, v in rec.items() if key not in ("v", "out")}
                    if on_record(rec):
                        return
    finally:
        sel.close()


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
                _kill_uid(run_uid)
        if backend == "root":
            _remove_uid_files((uid, uid + 1))
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("code sandbox: cleanup after a run failed: %s", exc)
    remove_tree(scratch)
