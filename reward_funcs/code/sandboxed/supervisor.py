"""The sandbox's supervisor, started by the parent as ``python -I -S -B sandboxed/__main__.py supervisor RESULT_FD``.

It reads the job from stdin, builds the isolated file system (namespace backends, `rootfs`), then for each run
starts the solution's process (`candidate`: a fresh interpreter, so that nothing of this process's memory, the job
with its test program included, is in it), feeds it, enforces the per-test wall time (`collect`), kills every
process of the run when it ends, and writes one record per test to ``RESULT_FD``. Only the supervisor holds
``RESULT_FD`` (every started process closes it before anything else runs there) and it is not dumpable, so records on
that channel are the supervisor's, never the candidate's. For assert-style tests a forked `oracle` runs the test
program against the candidate's call server.
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import sys
import time

from . import collect
from .confine import MINIMAL_ENV, clean_sys_path, confine, private_tmp
from .oracle import run_tests
from .os_calls import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    pids,
    prctl,
    proc_ppid,
    proc_uid,
    read_all,
    reap_zombies,
    write_all,
)
from .rootfs import build_root

SANDBOXED_DIR = os.path.dirname(os.path.realpath(__file__))
SANDBOXED_DIR_INSIDE = "/sandbox/sandboxed"  # where the namespace backends show this folder (nothing else of the host)


class Supervisor:
    def __init__(self, spec: dict, result_fd: int) -> None:
        self.spec = spec
        self.result_fd = result_fd
        self.nonce = spec["nonce"]
        self.backend = spec["backend"]  # "ns-root" | "ns-user" | "root" | "user"
        self.uid = spec.get("uid")
        self.oracle_uid = spec.get("oracle_uid")  # root backends: the oracle's own uid, out of the candidate's reach
        self.limits = spec["limits"]
        # Where started processes work: the tmpfs /tmp inside the namespaces (the oracle mounts a private one over
        # it), folders of the run's scratch otherwise.
        self.workdir = spec["workdir"]
        self.oracle_dir = spec["oracle_dir"]
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.sandboxed_dir = SANDBOXED_DIR_INSIDE if self.backend.startswith("ns") else SANDBOXED_DIR
        # The interpreter to exec, resolved before the file system is replaced: a venv's bin/ is visible there only
        # with site-packages (stdlib-only runs bind the real install, not the venv's symlink to it).
        self.python = sys.executable if not sys.flags.no_site else os.path.realpath(sys.executable)
        self.started = False  # whether a solution process was started (the parent is told once, see start_candidate)

    def emit(self, record: dict) -> None:
        record["nonce"] = self.nonce
        write_all(self.result_fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def fail_rest(self, k: int, n: int, outcome: str, detail: str) -> None:
        for i in range(k, n):
            self.emit({"k": i, "o": outcome, "d": detail})

    # -- starting and killing the run's processes ------------------------------------------------------------
    def _fork_with_fds(self, fds: list[int]) -> int:
        """Fork; in the child, move ``fds`` to 0, 1, 3, 4, ... (2 is /dev/null) and close everything else, notably
        RESULT_FD. Returns the pid (0 in the child)."""
        pid = os.fork()
        if pid != 0:
            return pid
        try:
            os.setsid()
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            keep = [os.dup(fd) for fd in fds]  # fresh numbers first, so that no dup2 below clobbers a source
            targets = [0, 1, *range(3, 3 + len(keep) - 2)]
            os.dup2(self.devnull, 2)
            for fd, target in zip(keep, targets):
                os.dup2(fd, target)
            os.closerange(targets[-1] + 1, 1 << 16)
        except BaseException:
            os._exit(70)
        return 0

    def start_candidate(self, run: dict, stdin_fd: int, stdout_fd: int, report_w: int, cpu_s: int) -> int:
        """Start the solution's process: fork, then ``exec`` a fresh interpreter that reads ``run`` (what it needs,
        nothing more) from a memfd on fd 4 and confines itself before running the solution."""
        settings = {
            "backend": self.backend,
            "uid": self.uid,
            "limits": self.limits,
            "cpu_s": cpu_s,
            "workdir": self.workdir,
            "preimport": self.spec.get("preimport", []),
        }
        if not self.started:  # from here on the parent takes this run's end, however it comes, for a verdict
            self.emit({"k": -2, "o": "started"})
            self.started = True
        run_fd = os.memfd_create("run", 0)
        write_all(run_fd, json.dumps({**run, **settings}).encode())
        os.lseek(run_fd, 0, os.SEEK_SET)
        pid = self._fork_with_fds([stdin_fd, stdout_fd, report_w, run_fd])
        if pid == 0:
            try:
                flags = ["-I", "-B"] + (["-S"] if sys.flags.no_site else [])
                env = {**MINIMAL_ENV, "HOME": self.workdir, "TMPDIR": self.workdir}
                os.chdir(self.workdir)
                main = os.path.join(self.sandboxed_dir, "__main__.py")
                os.execve(self.python, [self.python, *flags, main, "candidate"], env)
            finally:
                os._exit(70)
        os.close(run_fd)
        return pid

    def start_oracle(self, stdin_fd: int, stdout_fd: int, verdict_w: int, cpu_s: int, start: int) -> int:
        """Assert-style tests from test ``start`` on: fork the oracle (it keeps this process's copy of the test
        program) and confine it. The tests read nothing the candidate can write: modules from the Python install only
        (no folder of ours on ``sys.path``), files in a working folder of their own (namespaces: a private tmpfs in a
        mount namespace of their own; ``root``: a folder of the oracle's uid)."""
        pid = self._fork_with_fds([stdin_fd, stdout_fd, verdict_w])
        if pid == 0:
            try:
                if self.backend.startswith("ns"):
                    private_tmp(int(self.limits["file_mb"]))
                clean_sys_path()
                confine(self.backend, self.oracle_uid, self.limits, cpu_s, self.oracle_dir)
                units, cap = int(self.spec["units"]), int(self.limits["output_bytes"])
                run_tests(self.spec["steps"], self.spec["names"], start, units, cap)
            finally:
                os._exit(70)
        return pid

    def kill_candidates(self) -> None:
        """SIGKILL every process of the run, including setsid/double-forked descendants, then reap zombies."""
        for _ in range(200):
            victims = self._run_pids()
            if not victims:
                break
            if self.backend in ("root", "ns-root"):
                for uid in (self.uid, self.oracle_uid):  # kill(-1) as each sandbox uid: atomic w.r.t. fork
                    self._kill_uid(uid)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.001)
            reap_zombies()
        reap_zombies()

    def _run_pids(self) -> list[int]:
        me = os.getpid()
        if self.backend.startswith("ns"):
            return [p for p in pids() if p != me]  # we are PID 1: everything else in the namespace is the run's
        if self.backend == "root":
            return [p for p in pids() if p != me and proc_uid(p) in (self.uid, self.oracle_uid)]
        # "user": we are a child subreaper, so orphaned descendants are re-parented to us.
        return [p for p in pids() if p != me and proc_ppid(p) == me]

    def _kill_uid(self, uid: int) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    # -- the three kinds of run --------------------------------------------------------------------------------
    def run_calls(self) -> None:
        """Call-based cases: one candidate process runs them in order; after a timeout or crash a fresh candidate
        process (re-running the solution module) continues with the next one."""
        cases = self.spec["cases"]
        timeout = float(self.limits["timeout_s"])
        run = {"mode": "calls", "code": self.spec["code"], "cases": cases}
        k = 0
        while k < len(cases):
            r, w = os.pipe()
            cpu = int(math.ceil(timeout * (len(cases) - k + 1))) + 1
            pid = self.start_candidate({**run, "start": k}, self.devnull, self.devnull, w, cpu)
            os.close(w)
            k = collect.collect_calls(self, pid, r, k, len(cases), timeout)
            os.close(r)
            self.kill_candidates()

    def run_program(self) -> None:
        """Assert-style tests: the candidate process serves calls, the oracle process runs the tests and reports one
        record per test; after a timeout or a crash a fresh pair continues with the next test."""
        timeout = float(self.limits["timeout_s"])
        n = int(self.spec["units"])
        k = 0
        while k < n:
            cpu = int(math.ceil(timeout * (n - k + 1))) + 1
            req_r, req_w = os.pipe()  # oracle -> candidate: calls
            resp_r, resp_w = os.pipe()  # candidate -> oracle: answers
            self.start_candidate({"mode": "server", "code": self.spec["code"]}, req_r, self.devnull, resp_w, cpu)
            verdict_r, verdict_w = os.pipe()  # oracle -> supervisor: made after the candidate exists, never its
            oracle = self.start_oracle(resp_r, req_w, verdict_w, cpu, k)
            for fd in (req_r, req_w, resp_r, resp_w, verdict_w):
                os.close(fd)
            k = collect.collect_calls(self, oracle, verdict_r, k, n, timeout)
            os.close(verdict_r)
            self.kill_candidates()

    def run_stdio(self) -> None:
        """stdin/stdout cases: a fresh candidate process per case, stdin from a memfd holding that case's input."""
        timeout = float(self.limits["timeout_s"])
        cap = int(self.limits["output_bytes"])
        for k, data in enumerate(self.spec["inputs"]):
            stdin = os.memfd_create("stdin", 0)
            write_all(stdin, data.encode())
            os.lseek(stdin, 0, os.SEEK_SET)
            out_r, out_w = os.pipe()
            rep_r, rep_w = os.pipe()
            run = {"mode": "stdio", "code": self.spec["code"]}
            pid = self.start_candidate(run, stdin, out_w, rep_w, int(math.ceil(timeout)) + 1)
            for fd in (stdin, out_w, rep_w):
                os.close(fd)
            rec = collect.collect_stdio(self, pid, out_r, rep_r, timeout, cap)
            for fd in (out_r, rep_r):
                os.close(fd)
            self.kill_candidates()
            rec["k"] = k
            self.emit(rec)
            if rec.get("syntax"):
                for i in range(k + 1, len(self.spec["inputs"])):
                    self.emit({"k": i, "o": "error", "d": rec["d"]})
                return


def main(argv: list[str]) -> int:
    result_fd = int(argv[0])
    os.set_inheritable(result_fd, False)
    spec = json.loads(read_all(0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # No handler for any signal: the kernel then drops every signal that processes inside a PID namespace send to
    # its init (us, on ns-*), where Python's SIGINT handler let a candidate stop the run with KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sup = Supervisor(spec, result_fd)
    # Not dumpable: a same-uid process (user backends) cannot ptrace us or open /proc/<us>/fd/RESULT_FD. Forked
    # processes (the oracle) inherit it; exec'd ones (the candidate) do not, and hold nothing of ours.
    prctl(PR_SET_DUMPABLE, 0)
    if sup.backend.startswith("ns"):
        build_root(
            spec["scratch"], spec["python_paths"], int(sup.limits["file_mb"]), {SANDBOXED_DIR: SANDBOXED_DIR_INSIDE}
        )
    else:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        for mod in spec.get("preimport", ()):  # for the oracle: stdlib behind a directory the sandbox uid cannot enter
            try:
                __import__(mod)
            except Exception:
                pass
    try:
        {"stdio": sup.run_stdio, "calls": sup.run_calls, "program": sup.run_program}[spec["mode"]]()
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            return 0  # the parent went away
        raise
    sup.kill_candidates()
    sup.emit({"k": -1, "o": "end"})
    return 0
