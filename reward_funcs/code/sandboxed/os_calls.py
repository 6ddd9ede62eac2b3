"""Thin wrappers over the Linux calls the sandbox's processes make: prctl, mount, whole-buffer pipe I/O, /proc scans."""

from __future__ import annotations

import ctypes
import json
import os
import signal

# prctl / mount constants (linux/prctl.h, linux/mount.h, linux/capability.h).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
ST_FLAG_TO_MS = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC}  # statvfs f_flag bits -> mount flags (locked in userns)

libc = ctypes.CDLL(None, use_errno=True)
# Files and folders in a scratch tmpfs (the candidate's /tmp, the oracle's /oracle): each costs about 1 KiB of kernel
# memory that neither the tmpfs size nor RLIMIT_AS counts (210,000 empty files held 210 MiB before this bound).
TMPFS_INODES = 4096


def scratch_tmpfs(file_mb: int, mode: str) -> str:
    """Mount options of a scratch tmpfs: ``2 * file_mb + 1`` MiB and `TMPFS_INODES` inodes."""
    return f"size={int(file_mb) * 2 + 1}m,nr_inodes={TMPFS_INODES},mode={mode}"


def prctl(option: int, arg: int = 0) -> int:
    return libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s):
        return None if s is None else s.encode()

    if libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def report(fd: int, record: dict) -> None:
    """Write one report (a JSON line, the format of every report pipe); a process that cannot report ends (71)."""
    try:
        write_all(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
    except BaseException:
        os._exit(71)


def describe(exc: BaseException) -> str:
    """An exception as a report's detail: its type and message, capped."""
    return f"{type(exc).__name__}: {exc}"[:300]


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _proc_stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def proc_ppid(pid: int) -> int | None:
    fields = _proc_stat_fields(pid)
    try:
        return int(fields[1]) if fields else None
    except (ValueError, IndexError):
        return None


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def reap_zombies_except(pid: int) -> None:
    """Reap orphans re-parented to us (PID 1 / subreaper) without consuming the exit status of ``pid``."""
    me = os.getpid()
    for p in pids():
        if p == pid or p == me:
            continue
        fields = _proc_stat_fields(p)
        if fields and len(fields) > 1 and fields[1] == str(me).encode() and fields[0] == b"Z":
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass


def wait_status(pid: int) -> str:
    """Wait for ``pid`` and describe how it ended: ``exit N``, ``signal NAME`` or ``gone``."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "gone"
    if os.WIFSIGNALED(status):
        return f"signal {signal_name(os.WTERMSIG(status))}"
    return f"exit {os.WEXITSTATUS(status)}"


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number itself for signals without a name (real-time ones: a process can die of 40)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def printable(text: object, limit: int = 500) -> str:
    """A detail the candidate wrote, as plain one-line text: control characters (terminal escapes, newlines that
    would forge log lines) become ``?``, at most ``limit`` characters.

    >>> printable("ok\\x1b[2J\\nPASSED")
    'ok?[2J?PASSED'
    """
    text = text if type(text) is str else type(text).__name__  # str() of a 900-deep list would raise
    return "".join(c if c.isprintable() else "?" for c in text[:limit])
