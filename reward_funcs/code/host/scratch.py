"""A run's scratch folders and what is left after it: folders of dead trainers, processes and files of the sandbox
uids. Cleanup never raises: a cleanup problem must not turn a verdict into no verdict."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

SCRATCH_PREFIX = "code-sandbox-"
_lock = threading.Lock()
_swept: set[str] = set()  # temp folders already cleared of stale scratch by this process
logger = logging.getLogger("reward_funcs.code.sandbox")


def make_scratch(backend: str, uid: int | None) -> tuple[str, str, str]:
    """The run's scratch folder, named after this process (see :func:`sweep_stale_scratch`), and the working folders
    of the candidate and of the oracle. Namespaces: the scratch is the mount point of the new root, the candidate
    works in its tmpfs ``/tmp`` and the oracle in a private tmpfs on ``/oracle``. Fallbacks: ``run`` and ``oracle``
    in it, the oracle's closed to the candidate's uid (``root``; the ``user`` fallback has only one uid)."""
    base = tempfile.gettempdir()
    sweep_stale_scratch(base)
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{process_start(os.getpid())}-", dir=base)
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


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def sweep_stale_scratch(base: str) -> None:
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
        parts = e.name[len(SCRATCH_PREFIX) :].split("-")
        if not e.name.startswith(SCRATCH_PREFIX) or len(parts) < 3 or not parts[0].isdigit():
            continue
        try:
            mine = e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == os.geteuid()
        except OSError:
            continue
        if mine and process_start(int(parts[0])) != parts[1]:
            remove_tree(e.path)


def remove_tree(path: str) -> None:
    """Remove a folder the candidate wrote in, whatever it made there; never raises. ``rm -rf`` walks any depth,
    where ``shutil.rmtree`` recurses once per level (3000 nested folders raised ``RecursionError``); folders the
    candidate made unreadable get their owner's rights back."""
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


def count_user_procs(uid: int) -> int:
    """Processes (``/proc`` entries) owned by ``uid``."""
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


def kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (``kill(-1)`` issued as that uid reaches all of them at once)."""
    for _ in range(20):
        if not _procs_of_uid(uid):
            return
        code = f"import os\nos.setgroups([])\nos.setresgid({uid},{uid},{uid})\nos.setresuid({uid},{uid},{uid})\n"
        code += "os.kill(-1, 9)"
        subprocess.run([sys.executable, "-I", "-S", "-c", code], check=False, timeout=30)
        time.sleep(0.01)


def remove_uid_files(uids: tuple[int, ...]) -> None:
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
