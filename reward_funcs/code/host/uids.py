"""Fresh unprivileged uids for the root backends: a pair per run (candidate, oracle), never shared by two runs on the
machine, whatever trainer started them."""

from __future__ import annotations

import fcntl
import os
import secrets
import threading

UID_BASE = 0x5C000000  # far above any real account; two fresh uids (candidate, oracle) per concurrent run
UID_SLOTS = 1 << 16  # uid pairs, drawn at random and held by a lock on one byte of a machine-wide lock file
UID_LOCK_FILE = "/tmp/code-sandbox-uids.lock"  # fixed (not the temp dir): every trainer on the machine uses it
_lock = threading.Lock()
_uid_lock: dict[str, int] = {}  # "fd", "pid": the lock file as opened by this process (record locks are per process)
_slots_in_use: set[int] = set()  # record locks do not exclude the threads of one process from each other


def _uid_lock_fd() -> int:
    """This process's handle on the machine-wide uid lock file (reopened after a fork: locks are per process)."""
    if _uid_lock.get("pid") != os.getpid():
        fd = os.open(UID_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # planted by someone else: their locks, not ours
            os.close(fd)
            raise RuntimeError(f"{UID_LOCK_FILE} is not a private file of this user")
        _uid_lock.update(fd=fd, pid=os.getpid())
    return _uid_lock["fd"]


def allocate_uids() -> int:
    """A uid pair no other run on this machine holds: the first uid for the candidate, the next for the oracle.

    A random slot, locked (one byte of the lock file) until :func:`release_uids`; the kernel drops the lock when
    the trainer dies, so a killed trainer never strands a slot.
    """
    fd = _uid_lock_fd()
    for _ in range(10_000):
        slot = secrets.randbelow(UID_SLOTS)
        with _lock:
            if slot in _slots_in_use:
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            except OSError:
                continue  # another trainer's run holds it
            _slots_in_use.add(slot)
        return UID_BASE + 2 * slot
    raise RuntimeError("no free sandbox uid")


def release_uids(uid: int) -> None:
    slot = (uid - UID_BASE) // 2
    with _lock:
        fcntl.lockf(_uid_lock_fd(), fcntl.LOCK_UN, 1, slot)
        _slots_in_use.discard(slot)
