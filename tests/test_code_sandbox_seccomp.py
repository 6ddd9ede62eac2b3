"""The sandbox's system-call allow-list, read from the exported BPF programs of each architecture it supports.

The programs are run here by a small classic-BPF interpreter on made-up ``seccomp_data``: x86-64 is also exercised
for real by every sandbox test; aarch64's program is checked only this way.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

import pytest

from reward_funcs.code.host import seccomp

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
ALLOW, KILL_PROCESS, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050000 | errno.ENOSYS
# What a Python program needs (besides what the interpreter's start-up makes the whole suite use).
ESSENTIAL = ("read", "write", "openat", "close", "mmap", "munmap", "brk", "futex", "execve", "wait4", "exit_group")
ESSENTIAL += ("kill", "rt_sigaction", "getrandom", "pipe2", "dup3", "newfstatat", "getdents64", "socketpair")


def run_bpf(prog: list[tuple[int, int, int, int]], nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """The action a classic BPF seccomp program returns for system call ``nr`` of ``arch`` with ``args``."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    a = x = pc = 0
    mem = [0] * 16
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
        elif code in (0x00, 0x01, 0x60, 0x61, 0x02, 0x03, 0x54, 0x87, 0x07):
            a, x = _alu(code, k, a, x, mem)
        elif code == 0x05:  # ja
            pc += k
        elif code & 0x07 == 0x05:  # conditional jumps, against k or x
            src = x if code & 0x08 else k
            taken = {0x10: a == src, 0x20: a > src, 0x30: a >= src, 0x40: bool(a & src)}[code & 0xF0]
            pc += jt if taken else jf
        elif code == 0x06:  # ret k
            return k
        else:
            raise ValueError(f"BPF opcode {code:#x} not interpreted")


def _alu(code: int, k: int, a: int, x: int, mem: list[int]) -> tuple[int, int]:
    if code == 0x00:
        return k, x
    if code == 0x01:
        return a, k
    if code == 0x60:
        return mem[k], x
    if code == 0x61:
        return a, mem[k]
    if code in (0x02, 0x03):
        mem[k] = a if code == 0x02 else x
        return a, x
    if code == 0x54:
        return a & k, x
    return (x, x) if code == 0x87 else (a, a)


def number(arch: str, name: str) -> int:
    """``name``'s number on ``arch`` (negative: the architecture has no such call), as libseccomp knows it."""
    lib = seccomp._lib()
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    return lib.seccomp_syscall_resolve_name_arch(lib.seccomp_arch_resolve_name(arch.encode()), name.encode())


@pytest.fixture(params=sorted(AUDIT_ARCH))
def arch(request):
    return request.param


@pytest.fixture
def verdict(arch):
    prog = seccomp.instructions(seccomp.filter_bpf(arch))

    def check(name: str, *args: int, audit_arch: int | None = None) -> int:
        nr = number(arch, name)
        assert nr >= 0, f"{name} is not a system call of {arch}"
        return run_bpf(prog, nr, AUDIT_ARCH[arch] if audit_arch is None else audit_arch, args)

    return check


def test_the_lists_are_disjoint():
    assert not set(seccomp.ALLOWED) & set(seccomp.DENIED)
    assert not {name for name, _ in seccomp.CONDITIONAL} & set(seccomp.DENIED)


def test_what_a_program_needs_is_allowed(verdict):
    for name in ESSENTIAL:
        assert verdict(name) == ALLOW, name


def test_every_denied_call_fails_with_enosys(arch, verdict):
    present = [name for name in seccomp.DENIED if number(arch, name) >= 0]
    assert {"keyctl", "add_key", "semget", "msgget", "shmget", "memfd_create", "io_uring_setup", "ptrace"} <= set(
        present
    )
    for name in present:
        assert verdict(name) == ENOSYS, name


def test_argument_rules(verdict):
    thread = 0x3D0F00  # CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | ... (pthread_create)
    assert verdict("clone", thread) == ALLOW
    for flag in (0x00020000, 0x10000000, 0x20000000, 0x40000000):  # NEWNS, NEWUSER, NEWPID, NEWNET
        assert verdict("clone", thread | flag) == ENOSYS
    assert verdict("socket", 1) == ALLOW  # AF_UNIX
    assert verdict("socket", 1 | 1 << 32) == ALLOW  # the kernel reads an int: the high half does not matter
    for family in (2, 10, 16, 17):  # AF_INET, AF_INET6, AF_NETLINK, AF_PACKET
        assert verdict("socket", family) == ENOSYS
    assert verdict("kill", 5, 9) == ALLOW and verdict("kill", 0, 9) == ALLOW  # a process, its own group
    for pid in (-1, -5):  # every process the uid may signal (the trainer's, in the user fallback), another group
        assert verdict("kill", pid & 0xFFFFFFFF, 9) == ENOSYS
        assert verdict("kill", pid & 0xFFFFFFFFFFFFFFFF, 9) == ENOSYS
    for name, index in (("prlimit64", 0), ("setpriority", 1), ("sched_setaffinity", 0)):
        assert verdict(name, *[0] * 3) == ALLOW, name
        other = [0, 0, 0]
        other[index] = 1  # pid 1: another process (the supervisor, in a PID namespace)
        assert verdict(name, *other) == ENOSYS, name


def test_other_architectures_and_x32_are_killed(arch, verdict):
    foreign = next(v for k, v in AUDIT_ARCH.items() if k != arch)
    assert verdict("read", audit_arch=foreign) == KILL_PROCESS
    assert verdict("read", audit_arch=0x40000003) == KILL_PROCESS  # i386 (int 0x80 from a 64-bit process)
    if arch == "x86_64":
        prog = seccomp.instructions(seccomp.filter_bpf(arch))
        assert run_bpf(prog, 0x40000000 | number(arch, "read"), AUDIT_ARCH[arch]) == KILL_PROCESS  # x32 ABI


HONEST = """
import asyncio, multiprocessing, os, resource, shutil, socket, subprocess, sys, tempfile, threading
def f(x):
    done = []
    t = threading.Thread(target=lambda: done.append(1))
    t.start()
    t.join()
    a, b = socket.socketpair()
    a.send(b"x")
    d = tempfile.mkdtemp()
    open(os.path.join(d, "f"), "w").write("1")
    shutil.rmtree(d)
    os.nice(1)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    echo = subprocess.run([sys.executable, "-c", "print(2)"], capture_output=True).stdout
    with multiprocessing.Pool(2) as pool:
        total = sum(pool.map(abs, range(-x, 0)))
    return [done, b.recv(1).decode(), echo.decode(), total, asyncio.run(asyncio.sleep(0, "ok"))]
"""


def test_an_honest_program_runs_under_the_filter():
    """Threads, a local socket pair, files, niceness, rlimits, a subprocess, a process pool and asyncio: what the
    allow-list must leave to correct solutions (an unlisted call would fail with ENOSYS)."""
    from reward_funcs import run_code_tests

    if os.uname().machine not in seccomp.ARCHES:
        pytest.skip("no allow-list for this architecture")
    tests = {"fn_name": "f", "inputs": [[4]], "outputs": [[[1], "x", "2\n", 10, "ok"]]}
    report = run_code_tests(HONEST, tests, timeout_s=30)
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("passed", "")], report
