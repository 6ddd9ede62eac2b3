"""Confinement of a sandboxed process, applied before any code of the solution (or of the tests) runs in it."""

from __future__ import annotations

import ctypes
import os
import resource
import signal

from .os_calls import (
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    PR_SET_SECUREBITS,
    libc,
    prctl,
)

MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}


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
