"""The isolated file system of the namespace backends: a read-only skeleton replaces the visible tree."""

from __future__ import annotations

import os

from .os_calls import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    ST_FLAG_TO_MS,
    mount,
    scratch_tmpfs,
)

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def build_root(new: str, read_only_dirs: list[str], file_mb: int, moved: dict[str, str]) -> None:
    """Make ``new`` (an empty directory) the root: system dirs and ``read_only_dirs`` (the Python install) bound
    read-only at their own paths, each ``moved`` source folder bound read-only at its target path (this package's
    ``sandboxed`` folder, away from the host's tree), ``/dev`` nodes, a fresh ``/proc``, a size-limited tmpfs at
    ``/tmp`` (the working directory) and an empty ``/oracle``. Everything lives in this mount namespace and vanishes with it."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    # The scratch /tmp first: a Python install or venv that lives under /tmp is then bound inside it (in folders of
    # root's, which the sandbox uid cannot rename or remove), instead of the scratch tmpfs hiding it.
    os.makedirs(new + "/tmp")
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, scratch_tmpfs(file_mb, "1777"))
    done: list[str] = []
    binds = [(p, p) for p in [*SYSTEM_DIRS, *(os.path.realpath(p) for p in read_only_dirs)]]
    for src, dst in [*binds, *moved.items()]:
        if not os.path.lexists(src) or any(dst == d or dst.startswith(d + "/") for d in done):
            continue
        done.append(dst)
        dst = new + dst
        if os.path.islink(src) and os.path.dirname(src) == "/":
            os.symlink(os.readlink(src), dst)  # merged-/usr layouts: /bin -> usr/bin
            continue
        if not os.path.isdir(src):
            continue
        os.makedirs(dst, exist_ok=True)
        mount(src, dst, None, MS_BIND | MS_REC)
        locked = sum(ms for st, ms in ST_FLAG_TO_MS.items() if os.statvfs(src).f_flag & st)
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked)
    _seal_tmp_binds(new, done)
    _make_dev(new)
    os.makedirs(new + "/oracle")  # the oracle's working folder: it mounts a private tmpfs there (confine.private_tmp)
    os.makedirs(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, new, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(new)
    os.chdir("/tmp")


def _make_dev(new: str) -> None:
    os.makedirs(new + "/dev")
    for name in ("null", "zero", "full", "random", "urandom"):
        open(f"{new}/dev/{name}", "w").close()
        mount(f"/dev/{name}", f"{new}/dev/{name}", None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("shm", "/tmp"),
    ):
        os.symlink(target, f"{new}/dev/{name}")


def _seal_tmp_binds(new: str, binds: list[str]) -> None:
    """A Python install or venv under /tmp is bound inside the writable scratch tmpfs: make the top folder above each
    such bind a read-only mount of its own, so that no process there (the user-namespace backend's candidate owns
    these folders) can rename it and put modules of its own where the tests import from."""
    tops = {"/tmp/" + d[len("/tmp/") :].split("/")[0] for d in binds if d.startswith("/tmp/")}
    for top in sorted(tops):
        mount(new + top, new + top, None, MS_BIND | MS_REC)
        mount(None, new + top, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
