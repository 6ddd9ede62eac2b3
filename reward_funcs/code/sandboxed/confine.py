"""Confinement of a sandboxed process, applied before any code of the solution (or of the tests) runs in it."""

from __future__ import annotations

import base64
import ctypes
import os
import resource
import signal
import struct
import sys

from .os_calls import (
    MS_NODEV,
    MS_NOSUID,
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    PR_SET_SECUREBITS,
    libc,
    mount,
    prctl,
    scratch_tmpfs,
)

MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
# The folder ``__main__.py`` puts first on sys.path so that the roles import each other (see clean_sys_path).
SANDBOXED_PARENT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
CLONE_NEWNS = 0x20000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def confine(backend: str, uid: int | None, limits: dict, cpu_s: int, workdir: str) -> None:
    """rlimits, then the sandbox uid (root backends) or no capabilities (user namespace), ``no_new_privs``, the
    parent-death signal and a minimal environment whose home and temp folder are ``workdir``."""
    os.chdir(workdir)
    mb = 1 << 20
    for res, value in (
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb),
        (resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
        (resource.RLIMIT_FSIZE, int(limits["file_mb"]) * mb),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, int(limits["nproc"])),
    ):
        resource.setrlimit(res, value if isinstance(value, tuple) else (value, value))
    if backend in ("root", "ns-root"):
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif backend == "ns-user":
        drop_capabilities()
    if prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError("no_new_privs")
    load_syscall_filter(limits["seccomp"])  # last: setresuid and capset are not on its list
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of uid clears it: set (again) after the drop
    os.environ.clear()
    os.environ.update({**MINIMAL_ENV, "HOME": workdir, "TMPDIR": workdir})


def drop_capabilities() -> None:
    """User-namespace backend: the process shares the supervisor's uid, so drop every capability for good."""
    libc.prctl(PR_SET_SECUREBITS, ctypes.c_ulong(0x2F), 0, 0, 0)  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED (+locks)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def clean_sys_path() -> None:
    """Imports come from the Python install (and site-packages when allowed) only: drop the folder of this package,
    which a checkout under /tmp puts inside the candidate's writable tmpfs, and folders that do not exist (a missing
    ``python311.zip`` is a name anyone allowed to create it could fill)."""
    sys.path[:] = [p for p in sys.path if os.path.realpath(p) != SANDBOXED_PARENT and os.path.exists(p)]


def private_tmp(file_mb: int) -> None:
    """Namespace backends, oracle: a mount namespace of its own with a fresh tmpfs on ``/oracle`` (its working
    folder), which the candidate's processes cannot see. Needs the supervisor's capabilities: call before confine."""
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    mount("tmpfs", "/oracle", "tmpfs", MS_NOSUID | MS_NODEV, scratch_tmpfs(file_mb, "0777"))


def load_syscall_filter(encoded: str) -> None:
    """seccomp: load the allow-list the parent compiled (``reward_funcs/code/host/seccomp.py``, base64 of a raw BPF
    program); every system call it does not list fails from here on. Needs ``no_new_privs``."""
    raw = base64.b64decode(encoded)
    if not raw or len(raw) % 8:
        raise OSError("no seccomp program")
    prog = ctypes.create_string_buffer(raw, len(raw))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(raw) // 8, ctypes.addressof(prog)))
    args = (SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)
    if libc.prctl(PR_SET_SECCOMP, *map(ctypes.c_ulong, args)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")
