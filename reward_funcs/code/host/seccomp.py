"""The system calls the sandbox's candidate and oracle processes may make: an allow-list compiled with libseccomp.

The sandbox's processes run ``python -I -S`` on the standard library only, so the filter is built here, in the
trainer, through ctypes on the system's ``libseccomp.so.2``; the supervisor hands the raw BPF program to each process,
which loads it with ``prctl`` (``sandboxed/confine.py``) before any code of the solution or the tests runs.

Anchored on Docker's default profile (https://github.com/moby/profiles, ``seccomp/default.json``) and narrower:
everything not listed fails with ``ENOSYS``, the errno glibc takes as "this kernel lacks the call" and falls back
from (``clone3`` -> ``clone``, ``faccessat2`` -> ``faccessat``). Kernel objects outside the rlimits (SysV IPC, POSIX
message queues, memfds, keys, io_uring, BPF, perf events, userfaultfd) and the calls that reach other processes or
the system (``ptrace``, ``process_vm_*``, mount and namespace calls, ``kcmp``, modules, clocks) are not listed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import struct
import tempfile
import threading

# Allowed without conditions. Names a given architecture lacks (``open`` on aarch64) are skipped for it.
ALLOWED = (
    # files and descriptors
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "creat", "close", "close_range", "lseek", "_llseek", "dup", "dup2", "dup3", "fcntl", "fcntl64",
    "flock", "fsync", "fdatasync", "ftruncate", "ftruncate64", "truncate", "truncate64", "fallocate", "fadvise64",
    "fadvise64_64", "readahead", "sendfile", "sendfile64", "copy_file_range", "splice", "tee",
    "stat", "lstat", "fstat", "newfstatat", "stat64", "lstat64", "fstat64", "fstatat64", "statx", "statfs",
    "fstatfs", "statfs64", "fstatfs64", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat",
    "fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask", "utime", "utimes", "utimensat", "futimesat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "ioctl",
    "pipe", "pipe2", "poll", "ppoll", "select", "_newselect", "pselect6", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
    "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # memory (bounded by RLIMIT_AS)
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "map_shadow_stack",
    # processes, threads and signals of the sandbox's own
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "waitpid",
    "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigreturn", "rt_sigsuspend",
    "rt_sigpending", "rt_sigtimedwait", "sigaltstack", "pause", "restart_syscall",
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "setsid", "getsid",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "capget",
    "prctl", "arch_prctl", "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv",
    "futex_time64", "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "getpriority", "getrlimit", "ugetrlimit", "setrlimit",
    "getrusage", "times", "sysinfo", "uname", "getrandom", "getcpu",
    # time
    "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64", "clock_nanosleep",
    "clock_nanosleep_time64", "nanosleep", "gettimeofday", "time", "getitimer", "setitimer", "alarm",
    "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
    # local sockets only: socket() itself is allowed for AF_UNIX below
    "socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "getsockopt",
    "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
)  # fmt: skip

# Never allowed (they fall to the default ENOSYS like every unlisted call): named so that a test holds the list to it.
DENIED = (
    "keyctl", "add_key", "request_key",  # the trainer's session keyring; keys that outlive the run
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget", "shmat", "shmdt",
    "shmctl", "ipc",  # SysV IPC: kernel memory outside RLIMIT_AS, left on the host by the fallbacks
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "memfd_create", "memfd_secret", "io_uring_setup", "io_uring_enter", "io_uring_register", "io_setup",
    "io_submit", "bpf", "userfaultfd", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev",
    "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "clone3", "fsopen", "fsmount", "fsconfig",
    "fspick", "move_mount", "open_tree", "mount_setattr", "name_to_handle_at", "open_by_handle_at",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "capset", "personality", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "sethostname", "setdomainname", "iopl", "ioperm", "mknod", "mknodat", "fanotify_init",
    "inotify_init", "inotify_init1", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "mbind", "move_pages",
    "migrate_pages", "set_mempolicy", "mlock", "mlock2", "mlockall", "vmsplice", "process_madvise", "sync",
    "syncfs", "landlock_create_ruleset", "seccomp", "vhangup", "lookup_dcookie", "uselib",
)  # fmt: skip

# Allowed only with these arguments: (name, [(arg index, mask, value)]) where (arg & mask) == value.
_CLONE_NEWNS, _CLONE_NAMESPACES = 0x00020000, 0x7E000000  # NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_AF_UNIX, _SELF = 1, 0
_INT = 0xFFFFFFFF  # the kernel reads these arguments as 32-bit ints: compare the low half only
CONDITIONAL = (
    ("clone", [(0, _CLONE_NEWNS | _CLONE_NAMESPACES, 0)]),  # threads and processes, no new namespace
    ("socket", [(0, _INT, _AF_UNIX)]),  # no network on any backend, the fallbacks included
    ("kill", [(0, 0x80000000, 0)]),  # a process or its own group, never kill(-1): every process of the trainer's uid
    ("setpriority", [(1, _INT, _SELF)]),  # its own niceness only, never the supervisor's
    ("sched_setaffinity", [(0, _INT, _SELF)]),
    ("prlimit64", [(0, _INT, _SELF)]),  # its own limits only
)

# libseccomp's ABI (seccomp.h): actions, filter attributes, the comparison operator and its argument struct.
_ACT_ALLOW, _ACT_KILL_PROCESS = 0x7FFF0000, 0x80000000
_ACT_ERRNO = 0x00050000
_ATTR_ACT_BADARCH, _ATTR_CTL_NNP, _ATTR_CTL_OPTIMIZE = 2, 3, 8
_CMP_MASKED_EQ = 7
ARCHES = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}  # os.uname().machine -> libseccomp's name


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or cannot build a filter for this machine."""


_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(
            f"the code sandbox needs libseccomp ({exc}); install it (Debian/Ubuntu: apt-get install libseccomp2)"
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    for fn in ("seccomp_arch_add", "seccomp_arch_remove"):
        getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def native_arch() -> str:
    """This machine's architecture as libseccomp names it; `SeccompUnavailable` where the sandbox has no filter."""
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise SeccompUnavailable(f"the code sandbox has no seccomp allow-list for {os.uname().machine} yet")
    return arch


def filter_bpf(arch: str | None = None) -> bytes:
    """The allow-list as a raw BPF program (``struct sock_filter`` array) for ``arch`` (default: this machine's)."""
    return _build(arch or native_arch())


@functools.cache
def _build(arch: str) -> bytes:
    lib = _lib()
    token = lib.seccomp_arch_resolve_name(arch.encode())
    if token == 0:
        raise SeccompUnavailable(f"libseccomp does not know the architecture {arch!r}")
    with _lock:  # libseccomp's contexts are not shared between threads, but be plain about it
        ctx = lib.seccomp_init(_ACT_ERRNO | errno.ENOSYS)
        if not ctx:
            raise SeccompUnavailable("seccomp_init failed")
        try:
            _check(lib.seccomp_attr_set(ctx, _ATTR_ACT_BADARCH, _ACT_KILL_PROCESS), "badarch")  # i386, x32 calls
            _check(lib.seccomp_attr_set(ctx, _ATTR_CTL_NNP, 0), "nnp")  # confine.py sets no_new_privs itself
            lib.seccomp_attr_set(ctx, _ATTR_CTL_OPTIMIZE, 2)  # binary tree (libseccomp >= 2.5); linear otherwise
            if token != lib.seccomp_arch_native():
                _check(lib.seccomp_arch_add(ctx, token), "arch_add")
                _check(lib.seccomp_arch_remove(ctx, lib.seccomp_arch_native()), "arch_remove")
            for name in ALLOWED:
                _rule(lib, ctx, name, [])
            for name, conds in CONDITIONAL:
                _rule(lib, ctx, name, conds)
            return _export(lib, ctx)
        finally:
            lib.seccomp_release(ctx)


def _rule(lib: ctypes.CDLL, ctx: int, name: str, conds: list[tuple[int, int, int]]) -> None:
    # Numbers are the native architecture's (pseudo numbers, below zero, for calls it lacks): libseccomp translates
    # them by name for the filter's architecture and skips a call that architecture does not have.
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr == -1:  # __NR_SCMP_ERROR: a name this libseccomp does not know (a call newer than it): not allowed
        return
    args = (_ArgCmp * max(len(conds), 1))(*[_ArgCmp(i, _CMP_MASKED_EQ, mask, value) for i, mask, value in conds])
    rc = lib.seccomp_rule_add_array(ctx, _ACT_ALLOW, nr, len(conds), args)
    if rc not in (0, -errno.EDOM):  # EDOM: not a call of the filter's architecture
        raise SeccompUnavailable(f"seccomp_rule_add({name}): {os.strerror(-rc)}")


def _export(lib: ctypes.CDLL, ctx: int) -> bytes:
    with tempfile.TemporaryFile() as f:
        _check(lib.seccomp_export_bpf(ctx, f.fileno()), "export_bpf")
        f.seek(0)
        raw = f.read()
    if not raw or len(raw) % 8:
        raise SeccompUnavailable("libseccomp exported no BPF program")
    return raw


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise SeccompUnavailable(f"seccomp_{what} failed: {os.strerror(-rc)}")


def instructions(raw: bytes) -> list[tuple[int, int, int, int]]:
    """A BPF program as ``(code, jt, jf, k)`` tuples (tests read the exported filters with it)."""
    return [struct.unpack_from("HBBI", raw, i) for i in range(0, len(raw), 8)]
