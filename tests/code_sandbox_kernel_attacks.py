"""Attacks of the code sandbox's fourth review on kernel objects and the supervisor, one function each:
``attack(isolation) -> dict`` of what happened. Run in a fresh interpreter by tests/test_code_rewards_attacks.py, as
root and as an unprivileged user, like tests/code_sandbox_attacks.py. Not a test module itself (no ``test_`` prefix).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

from reward_funcs import make_code_reward
from reward_funcs.code.sandbox import Limits, resolve_backend, run_job
from reward_funcs.code.sandboxed.codec import decode_value

KEYCTL, ADD_KEY = 250, 248  # x86-64 (the attacks run here; other architectures are checked on the exported filter)
KEYCTL_JOIN, KEYCTL_CLEAR, KEYCTL_INVALIDATE, KEYCTL_READ, KEYCTL_SEARCH = 1, 7, 21, 11, 10
SESSION, USER = -3, -4  # KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING
SANDBOX_UIDS = range(0x5C000000, 0x5C000000 + (1 << 17))
libc = ctypes.CDLL(None, use_errno=True)


def _call(code: str, fn: str, args: list, isolation: str, **limits) -> object:
    """Run ``fn(*args)`` of ``code`` once in the sandbox; its value, or the record when it has none."""
    lim = Limits(**{"timeout_s": 20.0, **limits})
    rec = run_job(
        {"mode": "calls", "code": code, "cases": [{"fn": fn, "args": args}]}, lim, backend=resolve_backend(isolation)
    )
    return decode_value(rec[0]["v"]) if rec.get(0, {}).get("o") == "ok" else rec.get(0)


def _table(name: str) -> set[str]:
    with open(f"/proc/sysvipc/{name}") as f:
        return {line.split()[1] for line in f.read().splitlines()[1:]}


def _key_users() -> list[str]:
    with open("/proc/key-users") as f:
        return [line.strip() for line in f if int(line.split(":")[0]) in SANDBOX_UIDS]


IPC = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]
def hold():
    made = {"sem": sum(libc.semget(0, 32000, 0o1000 | 0o600) >= 0 for _ in range(20))}
    q = libc.msgget(0, 0o1000 | 0o600)
    made["msg"] = q >= 0 and libc.msgsnd(q, ctypes.byref(Msg(1, b"x" * 64)), 64, 0o4000) == 0
    made["shm"] = libc.shmget(0, 1 << 20, 0o1000 | 0o600) >= 0
    made["mqueue"] = libc.mq_open(b"/review4-left", 0o100 | 0o2, 0o600, None) >= 0
    try:
        os.close(os.memfd_create("x"))
        made["memfd"] = True
    except OSError:
        made["memfd"] = False
    made["user_key"] = libc.syscall(248, b"user", b"review4", b"y" * 100, 100, -4) > 0
    return made
"""


def sysv_ipc(isolation: str) -> dict:
    """SysV semaphores and message queues, shared memory, a POSIX message queue, a memfd, a user-keyring key:
    what the candidate could make, and what of it is left on the host after the run."""
    before = {t: _table(t) for t in ("sem", "msg", "shm")}
    made = _call(IPC, "hold", [], isolation, memory_mb=64, max_procs=1)
    time.sleep(0.2)
    left = {t: sorted(_table(t) - before[t]) for t in before}
    for t, flag in (("sem", "-s"), ("msg", "-q"), ("shm", "-m")):  # the unfixed sandbox left them: remove them
        for ident in left[t]:
            subprocess.run(["ipcrm", flag, ident], check=False)
    mq = libc.mq_open(b"/review4-left", 0)
    if mq >= 0:
        libc.mq_close(mq)
        libc.mq_unlink(b"/review4-left")
    return {"made": made, "left": left, "mqueue_left": mq >= 0}


SESSION_KEY = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def f(x):
    kid = libc.syscall(250, 10, -3, b"user", b"trainer-credential", 0)
    buf = ctypes.create_string_buffer(64)
    n = libc.syscall(250, 11, kid, buf, 64)
    planted = libc.syscall(248, b"user", b"left-by-candidate", b"x" * 10, 10, -3) > 0
    cleared = libc.syscall(250, 7, -3) == 0
    return [buf.raw[:max(n, 0)].decode(errors="replace"), planted, cleared]
"""


def session_keyring(isolation: str) -> dict:
    """The trainer holds a credential in its session keyring (as after a login); the candidate reads it, plants a key
    there and clears the keyring."""
    libc.syscall(KEYCTL, KEYCTL_JOIN, b"trainer-session")
    libc.syscall(ADD_KEY, b"user", b"trainer-credential", b"TOKEN-s3cr3t", 12, SESSION)
    got = _call(SESSION_KEY, "f", [0], isolation)
    return {
        "candidate": got,
        "credential_kept": libc.syscall(KEYCTL, KEYCTL_SEARCH, SESSION, b"user", b"trainer-credential", 0) > 0,
        "planted_left": libc.syscall(KEYCTL, KEYCTL_SEARCH, SESSION, b"user", b"left-by-candidate", 0) > 0,
    }


USER_KEYS = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def f(n):
    return sum(libc.syscall(248, b"user", b"k%d" % i, b"z" * 4000, 4000, -4) > 0 for i in range(n))
"""


def user_keyring(isolation: str) -> dict:
    """Keys in the sandbox uid's user keyring: how many the candidate added, and the key-users rows of sandbox uids
    that outlive the run (then removed, so that later runs start clean)."""
    before = set(_key_users())
    added = _call(USER_KEYS, "f", [4], isolation)
    time.sleep(0.5)
    rows = sorted(set(_key_users()) - before)
    for row in rows:
        _clear_keys(int(row.split(":")[0]))
    return {"added": added, "rows_left": len(rows)}


def _clear_keys(uid: int) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            rings = [libc.syscall(KEYCTL, 0, spec, 0) for spec in (USER, -5)]
            libc.syscall(KEYCTL, KEYCTL_CLEAR, USER)
            for ring in rings:
                libc.syscall(KEYCTL, KEYCTL_INVALIDATE, ring)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


INODES = r"""
import os
def f(limit):
    n = 0
    os.mkdir("d")
    try:
        while n < limit:
            os.close(os.open("d/%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError:
        pass
    return n
"""


def tmpfs_inodes(isolation: str) -> dict:
    """Empty files in the candidate's private /tmp (file_mb=1): each costs kernel memory that no size bound sees."""
    return {"files": _call(INODES, "f", [50_000], isolation, file_mb=1, memory_mb=64, max_procs=1)}


FORKS = r"""
import os, time
def f(x):
    kids = []
    for _ in range(64):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(20)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return len(kids) + 1
"""


def max_procs(isolation: str) -> dict:
    """How many processes a candidate runs under max_procs=4 while the trainer's user runs 30 other processes."""
    idle = [subprocess.Popen(["sleep", "60"]) for _ in range(30)]
    try:
        return {"procs": _call(FORKS, "f", [0], isolation, max_procs=4, memory_mb=64)}
    finally:
        for p in idle:
            p.kill()
            p.wait()


def supervisor_signals(isolation: str) -> dict:
    """The candidate interrupts or kills its supervisor (SIGINT to PID 1, SIGKILL to its parent); three in a row."""
    cheat = "import os, signal, time  # %d\nfor pid in (1, os.getppid()):\n    try:\n        os.kill(pid, signal.%s)\n"
    cheat += "    except OSError:\n        pass\ntime.sleep(1)\ndef f(x):\n    return 0\n"
    reward = make_code_reward(isolation=isolation, max_workers=1)
    comps = ["```python\n" + cheat % (i, sig) + "```" for i, sig in enumerate(("SIGINT", "SIGTERM", "SIGKILL"))]
    try:
        return {"scores": reward(comps, tests=["assert f(1) == 2"] * 3)}
    except BaseException as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"[:300]}


NETWORK = r"""
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
def f(port):
    got = []
    for family, addr in ((2, struct.pack("=H", 2) + struct.pack("!H4s8x", port, bytes([127, 0, 0, 1]))),):
        fd = libc.socket(family, 1, 0)
        ok = fd >= 0 and libc.connect(fd, addr, len(addr)) == 0
        got.append([fd >= 0, ok, ctypes.get_errno()])
    return got
"""


def network(isolation: str) -> dict:
    """The trainer listens on the loopback; the candidate (through ctypes: the root fallback may lack the socket
    module) opens an AF_INET socket and connects to it."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    got = _call(NETWORK, "f", [server.getsockname()[1]], isolation)
    try:
        server.accept()
        accepted = True
    except BlockingIOError:
        accepted = False
    server.close()
    return {"candidate": got, "accepted": accepted}


if __name__ == "__main__":
    import json

    print(json.dumps(globals()[sys.argv[1]](sys.argv[2])))
