"""The code sandbox's third adversarial review: each attack (tests/code_sandbox_attacks.py) in a fresh interpreter,
on every backend this machine offers: as root (``ns-root``, the ``root`` fallback) and as an unprivileged user
(``ns-user``, the ``user`` fallback; needs root to create that user's view of the interpreter). The subprocess
timeout bounds the hangs: a verdict is asserted, never a duration.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
USER = "sbxtest"
BACKENDS = ("ns-root", "root", "ns-user", "user")
ISOLATION = {"ns-root": "namespaces", "ns-user": "namespaces", "root": "rlimits", "user": "rlimits"}

# Run as USER in a private mount namespace: the interpreter may live under /root (pyenv), which USER cannot enter;
# bind it back under a traversable tmpfs on /root.
AS_USER = """set -e
hold=$(mktemp -d)
mount --bind /root "$hold"
mount -t tmpfs -o mode=0755 tmpfs /root
for d in $(ls -A "$hold"); do [ -d "$hold/$d" ] && mkdir "/root/$d" && mount --bind "$hold/$d" "/root/$d"; done
exec setpriv --reuid={user} --regid={user} --clear-groups --reset-env env PYTHONPATH={path} "$@"
"""


def _ensure_user() -> bool:
    try:
        pwd.getpwnam(USER)
        return True
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        return False
    return subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", USER]).returncode == 0


def _as_user(cmd: list[str]) -> list[str]:
    """``cmd`` run as USER in a private mount namespace (see AS_USER)."""
    script = AS_USER.format(user=USER, path=f"{REPO}:{REPO / 'tests'}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]


@functools.lru_cache(maxsize=1)
def _user_cannot_run() -> str | None:
    """Why USER cannot run this checkout's interpreter and tests here, or None."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("setpriv", "unshare")) or not _ensure_user():
        return "needs root, setpriv and unshare to run as an unprivileged user"
    probe = subprocess.run(
        _as_user([sys.executable, "-c", f"open({str(REPO / 'tests' / 'code_sandbox_attacks.py')!r}).close()"]),
        capture_output=True,
        text=True,
        cwd="/tmp",
        timeout=120,
    )
    if probe.returncode != 0:  # e.g. a checkout in a folder only root may enter (mktemp -d)
        return f"{USER} cannot read this checkout or its interpreter: {probe.stderr.strip()[-300:]}"
    return None


def _runnable(backend: str) -> str | None:
    """Why ``backend`` cannot be attacked here, or None."""
    if backend in ("ns-user", "user"):
        return _user_cannot_run()
    return None if os.geteuid() == 0 else "the root backends need root"


def attack(name: str, backend: str, timeout: float = 600, module: str = "code_sandbox_attacks") -> dict:
    """Run ``<module>.<name>`` on ``backend`` in a fresh interpreter and return what it reported."""
    why = _runnable(backend)
    if why:
        pytest.skip(why)
    path = f"{REPO}:{REPO / 'tests'}"
    cmd = [sys.executable, str(REPO / "tests" / f"{module}.py"), name, ISOLATION[backend]]
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    if backend in ("ns-user", "user"):
        cmd = _as_user(cmd)
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} on {backend}: no verdict within {timeout:g} s (the trainer hangs)")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def test_planted_module_does_not_reach_the_oracle(backend):
    """Item 1: a wrong solution plants random.py where the oracle used to import from (package under /tmp)."""
    got = attack("oracle_import_hijack", backend)
    assert got["out"].startswith("0.0 ['failed']"), got
    if backend != "user":  # the user fallback shares the trainer's uid: it can write the checkout (documented)
        assert got["planted"] == [
            "__init__.py",
            "asserts.py",
            "extract.py",
            "formats.py",
            "reward.py",
            "runner.py",
            "sandbox.py",
            "source_names.py",
        ], got


def test_huge_int_with_float_tol_scores_zero(backend):
    """Item 2: 10**400 against 2.5 with float_tol: a failure of that completion, not an error out of the call."""
    assert attack("float_tol_overflow", backend) == {"scores": [1.0, 0.0]}


def test_hash_colliding_set_is_rejected_not_decoded(backend):
    """Item 3: a record holding 200k colliding set keys gets a verdict (not minutes of decoding)."""
    got = attack("hash_collision_decode", backend, timeout=240)
    assert got["outcomes"] in (["failed"], ["error"]), got


def test_sysv_shm_and_memfd_cannot_hold_memory(backend):
    """Item 4: with memory_mb=128 the candidate holds no SysV segment or memfd, and none outlives the run."""
    got = attack("host_memory", backend)
    assert [o for o, _ in got["outcomes"]] == ["passed"], got  # hog() held [0 MiB of SysV shm, 0 MiB of memfd]
    assert got["left"] == 0, got


def test_split_setup_sends_no_expected_value(backend):
    """Item 5: cases tables and tuple unpacking that hold expected values stay test-side."""
    assert attack("split_setup_leak", backend) == {"fractions": [0.0, 0.0, 0.0]}


def test_candidate_crashing_the_supervisor_scores_zero(backend):
    """Item 6: malformed deep JSON and death by a real-time signal are the candidate's failures (0.0), four in a
    row raise nothing."""
    assert attack("supervisor_crash", backend) == {"scores": [0.0, 0.0, 0.0, 0.0]}


def test_parent_memory_stays_bounded(backend):
    """Item 7: eight huge records do not pile up in the trainer (842 MiB before the fix)."""
    got = attack("parent_memory", backend)
    assert got["passed"] == 0 and got["grew_mib"] < 200, got


def test_deep_tree_is_cleaned_and_correct_solution_scores(backend):
    """Item 8: 3000 nested folders: the correct solutions score 1.0, nothing is left in the scratch root."""
    assert attack("deep_tree", backend) == {"scores": [1.0] * 4, "left": []}


def test_extract_code_is_not_quadratic():
    """Item 10: 400 KiB of unclosed fences are parsed (the quadratic regex took about 20 minutes)."""
    assert attack("extract_quadratic", "ns-root" if os.geteuid() == 0 else "ns-user", timeout=120) == {
        "code": "x = 1\n"
    }


def test_float_tol_leaves_integers_exact(backend):
    """Item 11 and review 4: an integer expected value is matched only by an exactly equal output, however it is
    formatted (999999000.0, 9.99999e8) and at any size (inf and 3**13000 against 6,021 digits); floats still compare
    within the tolerance."""
    got = attack("float_tol_integers", backend)
    assert got == {"scores": [0.0] * 7 + [1.0], "direct": [False, False], "floats_still_close": [True, True]}, got


def test_tests_run_in_the_oracle_on_builtin_values(backend):
    """Review 4, class 1: method calls on a result, expected values in comprehensions or built from imported names,
    names of star or nested imports: a wrong solution fails each; correct ones pass, generators, map and key=f too."""
    got = attack("tests_run_in_the_oracle", backend)
    assert set(got["wrong"].values()) == {0.0} and set(got["right"].values()) == {1.0}, got


def test_undecodable_or_non_plain_answers_fail_their_test(backend):
    """Review 4: an answer the oracle cannot decode or check, or a result that is not plain data, fails its test; none
    raises out of the reward call (OverflowError and NotPlainData did)."""
    assert attack("undecodable_answers", backend) == {"scores": [0.0] * 6}


def test_tests_own_helper_wins_and_stays_test_side(backend):
    """Item 12: identity encode/decode, or a decode reading the helper's input from the stack, score 0 when the
    tests define the helper (split and program mode)."""
    assert attack("test_helper_precedence", backend) == {"fractions": [0.0, 0.0, 0.0]}


def test_stale_scratch_of_dead_trainers_is_removed(backend):
    """Also: a killed trainer's scratch is removed at the next start; a live process's is kept."""
    assert attack("stale_scratch", backend) == {"fraction": 1.0, "left": ["y"]}


def test_candidate_text_reaches_the_logs_printable(backend):
    """Also: terminal escapes and newlines in an exception message or an assert message become '?'."""
    assert attack("control_characters", backend) == {"printable": [True, True]}


# -- fourth review: kernel objects outside the rlimits, the supervisor (tests/code_sandbox_kernel_attacks.py) ------


def kernel_attack(name: str, backend: str) -> dict:
    return attack(name, backend, timeout=300, module="code_sandbox_kernel_attacks")


def test_sysv_ipc_mqueues_and_keys_are_denied_and_nothing_is_left(backend):
    """SysV semaphores held 320 MiB of kernel memory under memory_mb=64, and the fallbacks left semaphores, message
    queues, a POSIX message queue and keys on the host: the allow-list denies every one of these objects."""
    got = kernel_attack("sysv_ipc", backend)
    denied = {"sem": 0, "msg": False, "shm": False, "mqueue": False, "memfd": False, "user_key": False}
    assert got == {"made": denied, "left": {"sem": [], "msg": [], "shm": []}, "mqueue_left": False}, got


def test_no_network_on_any_backend(backend):
    """The fallbacks have no network namespace: a candidate reached a server on the trainer's loopback (a vLLM server,
    the distributed TCPStore). socket() is allowed for AF_UNIX only."""
    got = kernel_attack("network", backend)
    assert got["accepted"] is False and got["candidate"][0][:2] == [False, False], got


def test_trainer_session_keyring_is_out_of_reach(backend):
    """The candidate inherited the trainer's session keyring: it read a credential, planted a key that outlived the
    run and cleared the keyring. keyctl and add_key are not on the allow-list."""
    got = kernel_attack("session_keyring", backend)
    assert got == {"candidate": ["", False, False], "credential_kept": True, "planted_left": False}, got


def test_user_keyring_keys_do_not_outlive_the_run(backend):
    """Keys in the sandbox uid's user keyring stayed in the kernel for the next run that drew the uid."""
    assert kernel_attack("user_keyring", backend) == {"added": 0, "rows_left": 0}


@pytest.mark.parametrize("backend", ["ns-root", "ns-user"])
def test_private_tmp_bounds_inodes(backend):
    """Empty files take no tmpfs blocks: 442,000 of them held 441 MiB of kernel memory with file_mb=1."""
    got = kernel_attack("tmpfs_inodes", backend)
    assert isinstance(got["files"], int) and 0 < got["files"] <= 4096, got


def test_max_procs_is_the_solutions_own(backend):
    """max_procs=4 while the trainer's user runs 30 other processes: the solution gets 4 processes (ns-user gave it
    33, one more per process of the trainer's user). The user fallback shares the trainer's uid, whose processes
    come and go: there it is at most 4."""
    procs = kernel_attack("max_procs", backend)["procs"]
    if backend == "user":
        assert 0 < procs <= 4, procs
    else:
        assert procs == 4, procs


def test_candidate_signalling_its_supervisor_scores_zero(backend):
    """SIGINT to PID 1 (ns-user), SIGKILL to the parent (the user fallback): the candidate's failure, and three in a
    row raise nothing (they counted as sandbox failures and stopped training)."""
    assert kernel_attack("supervisor_signals", backend) == {"scores": [0.0, 0.0, 0.0]}


VICTIM = """
import os, sys
from reward_funcs.code.runner import run_code_tests
from reward_funcs.code.sandbox import resolve_backend
resolve_backend({iso!r})
open({ready!r}, "w").close()
r = run_code_tests("import time\\ndef f(x):\\n    time.sleep(3)\\n    return 2 * x", "assert f(2) == 4",
                   isolation={iso!r}, timeout_s=20)
print([o.outcome for o in r.outcomes])
"""
KILLER = """
import os, subprocess, sys, time
victim = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                           "echo 99 > /proc/sys/kernel/ns_last_pid; exec {py} {victim}"], stdout=subprocess.PIPE)
from reward_funcs.code.runner import run_code_tests
while not os.path.exists({ready!r}):
    time.sleep(0.05)
time.sleep(0.5)
for _ in range(3):
    run_code_tests("def g(x):\\n    return x", "assert g(1) == 1", isolation={iso!r})
print(victim.communicate(timeout=300)[0].decode().strip())
"""


@pytest.mark.parametrize("backend", ["ns-root", "root"])
def test_concurrent_trainers_never_share_a_uid(backend, tmp_path):
    """Item 9: two trainers with the same pid (pid namespaces) and run counters in step: the one's end-of-run kill
    must not take the other's candidate (a correct solution that sleeps)."""
    if os.geteuid() != 0:
        pytest.skip("uids are only drawn by the root backends")
    iso = ISOLATION[backend]
    ready, victim = str(tmp_path / "ready"), tmp_path / "victim.py"
    victim.write_text(VICTIM.format(iso=iso, ready=ready))
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER.format(iso=iso, ready=ready, py=sys.executable, victim=victim))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        f"echo 99 > /proc/sys/kernel/ns_last_pid; exec {sys.executable} {killer}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert out.stdout.strip().splitlines()[-1:] == ["['passed']"], out.stdout + out.stderr[-2000:]
