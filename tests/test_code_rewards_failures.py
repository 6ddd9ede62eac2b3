"""When the code sandbox itself fails: a clear error instead of rewards of None, and a fallback that never hides."""

from __future__ import annotations

import logging
import sys
import types

import pytest

import reward_funcs.code.reward as ct
import reward_funcs.code.sandbox as sb
from reward_funcs import make_code_reward

SANDBOX_FAILURE_LIMIT = getattr(ct, "SANDBOX_FAILURE_LIMIT", 3)
PROGRAMS = [
    f"```python\ndef f(x):\n    return x + {k}\n```" for k in range(2 * SANDBOX_FAILURE_LIMIT)
]  # distinct: each is run
TESTS = [f"assert f(1) == {1 + k}" for k in range(len(PROGRAMS))]  # every program passes its own test


def _broken_launcher(backend, result_fd, site_packages):
    # The supervisor dies at start-up, as it does when `unshare` is refused or the interpreter cannot start.
    return [
        sys.executable,
        "-c",
        "import sys; sys.stderr.write('unshare: unshare failed: Operation not permitted'); sys.exit(1)",
    ]


def test_a_sandbox_that_cannot_run_code_raises_after_a_few_failures(monkeypatch):
    backend = sb.resolve_backend("auto")  # probed while the sandbox still works
    monkeypatch.setattr(sb, "_launcher_cmd", _broken_launcher)
    reward = make_code_reward(max_workers=1, name="unit_tests")
    with pytest.raises(sb.SandboxUnavailable) as caught:
        reward(PROGRAMS, tests=TESTS)
    message = str(caught.value)
    assert (
        f"unit_tests: the code sandbox (backend {backend!r}) failed {SANDBOX_FAILURE_LIMIT} times in a row" in message
    )
    assert "Operation not permitted" in message  # what failed
    assert "isolation=" in message and "docs/code-sandbox.md" in message  # how to fix it


def test_an_isolated_failure_is_no_verdict_and_a_success_resets_the_count(monkeypatch):
    real = sb.run_job
    failures = iter([True] * (SANDBOX_FAILURE_LIMIT - 1) + [False] * 2 + [True] * (SANDBOX_FAILURE_LIMIT - 1))

    def flaky(*args, **kwargs):
        if next(failures, False):
            raise RuntimeError("sandbox supervisor failed (exit 1): transient")
        return real(*args, **kwargs)

    sb.resolve_backend("auto")
    monkeypatch.setattr(sb, "run_job", flaky)
    reward = make_code_reward(max_workers=1)
    with pytest.warns(RuntimeWarning, match="no verdict"):
        scores = reward(PROGRAMS, tests=TESTS)
    # failures, verdicts, failures again: never LIMIT in a row, so no error; a failure scores None, not 0.
    none = [None] * (SANDBOX_FAILURE_LIMIT - 1)
    assert scores == none + [1.0, 1.0] + none


def _popen_refused(*args, **kwargs):
    raise OSError(11, "Resource temporarily unavailable")  # fork refused: the process limit of the trainer's user


def _disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")


def _no_uid(*args, **kwargs):
    raise RuntimeError("no free sandbox uid")


def _out_of_memory(*args, **kwargs):
    raise MemoryError


NO_VERDICT_PATHS = {  # where the sandbox can fail without any fault of the candidate: (module attribute, stand-in)
    "supervisor cannot be started": ("subprocess.Popen", _popen_refused),
    "scratch folder cannot be made": ("make_scratch", _disk_full),
    "no free sandbox uid": ("_allocate_uids", _no_uid),
    "supervisor dies at start-up": ("_launcher_cmd", _broken_launcher),
    "trainer out of memory": ("run_job", _out_of_memory),
}


@pytest.mark.parametrize("path", sorted(NO_VERDICT_PATHS))
def test_a_run_without_a_verdict_scores_none_and_is_counted(monkeypatch, path):
    """Every way the sandbox can fail without a verdict scores None (never the candidate's 0.0), is counted on the
    reward (``no_verdict_rows``) and logged as ``<name>/no_verdict``; the row's duplicates count as rows."""
    sb.resolve_backend("auto")  # probed while the sandbox still works
    attribute, stand_in = NO_VERDICT_PATHS[path]
    if attribute == "_allocate_uids" and sb.resolve_backend("auto") not in ("ns-root", "root"):
        pytest.skip("uids are only drawn by the root backends")
    target = sb.subprocess if attribute == "subprocess.Popen" else sb
    monkeypatch.setattr(target, attribute.rsplit(".", 1)[-1], stand_in)
    reward = make_code_reward(partial_credit=True, max_workers=1, name="unit_tests")
    metrics = []
    with pytest.warns(RuntimeWarning, match="no verdict"):
        scores = reward(PROGRAMS[:1] * 2, tests=TESTS[:1] * 2, log_metric=lambda n, v: metrics.append((n, v)))
    assert scores == [None, None]
    assert reward.no_verdict_rows == 2 and ("unit_tests/no_verdict", 2.0) in metrics


def test_verdicts_and_unusable_tests_are_not_counted_as_no_verdict():
    reward = make_code_reward(max_workers=1)
    with pytest.warns(RuntimeWarning, match="unusable tests"):
        scores = reward(PROGRAMS[:2] + ["no code"], tests=[TESTS[0], "assert True", TESTS[0]])
    assert scores == [1.0, None, 0.0]
    assert reward.no_verdict_rows == 0


@pytest.fixture
def no_namespaces(monkeypatch):
    """Namespaces fail their probe; the fallbacks work (nothing is actually run by the tests using this)."""
    monkeypatch.setattr(sb, "_backend_cache", {})
    monkeypatch.setattr(sb, "_fallback_reasons", {}, raising=False)
    monkeypatch.setattr(
        sb, "_probe", lambda backend: "simulated: user namespaces disabled" if backend.startswith("ns") else ""
    )


@pytest.mark.parametrize("euid, backend", [(0, "root"), (1000, "user")])
def test_fallback_is_a_metric_and_warned_at_each_trainer_start(no_namespaces, monkeypatch, caplog, euid, backend):
    monkeypatch.setattr(sb.os, "geteuid", lambda: euid)
    reward = make_code_reward(name="unit_tests")
    metrics = []
    no_code = ["no code here"] * 2
    with caplog.at_level(logging.WARNING, logger="reward_funcs"):
        for state in [types.SimpleNamespace(global_step=0)] * 2 + [types.SimpleNamespace(global_step=0)]:
            kwargs = dict(trainer_state=state, log_metric=lambda name, value: metrics.append((name, value)))
            assert reward(no_code, tests=TESTS[:2], **kwargs) == [0.0, 0.0]
    notices = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert len(notices) == 2  # two trainer starts (two TrainerState objects), three calls
    assert "simulated: user namespaces disabled" in notices[0]
    if backend == "user":
        assert "under the trainer's own uid" in notices[0]
    assert [m for m in metrics if m[0].endswith("fallback")] == [("unit_tests/sandbox_fallback", 1.0)] * 3


def test_no_fallback_metric_is_zero():
    reward = make_code_reward(name="unit_tests")
    if sb.resolve_backend("auto") not in ("ns-root", "ns-user"):
        pytest.skip("namespaces unavailable here")
    metrics = []
    reward(["no code"], tests=TESTS[:1], trainer_state=object(), log_metric=lambda n, v: metrics.append((n, v)))
    assert metrics == [("unit_tests/sandbox_fallback", 0.0), ("unit_tests/no_verdict", 0.0)]


def test_namespaces_never_fall_back(no_namespaces, monkeypatch):
    monkeypatch.setenv("CODE_REWARD_ISOLATION", "rlimits")  # only consulted for isolation="auto"
    with pytest.raises(sb.SandboxUnavailable, match="namespace isolation unavailable"):
        sb.resolve_backend("namespaces")
    reward = make_code_reward(isolation="namespaces")
    with pytest.raises(sb.SandboxUnavailable, match="namespace isolation unavailable"):
        reward(PROGRAMS[:1], tests=TESTS[:1])
