"""Math verifier: hard time limit from any thread, cleanup of processes and files, gold parsed once, parallelism."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import psutil
import pytest

from reward_funcs import close_math_workers, make_math_reward
from reward_funcs.math import answers as ma
from reward_funcs.math import verdicts as mv

TIMEOUT = 1.0
# A hang guard, not a speed test: a call that has not returned after this long never will (the limit did not fire).
# Far above what a limit of TIMEOUT needs on a machine loaded many times over, and above the pool's own 120 s limit
# on a worker's start-up, so only a limit that never fires can trip it.
HANG_S = 300.0


@pytest.fixture(autouse=True)
def _no_cached_verdicts():
    # Forget cached verdicts so every test really goes through the workers.
    mv._VERDICTS.data.clear()
    mv._GOLD_STATUS.data.clear()


@pytest.fixture(scope="module", autouse=True)
def _stop_workers_at_the_end():
    yield
    close_math_workers()


@pytest.fixture
def fresh_workers():
    close_math_workers()
    yield
    close_math_workers()


def _pool(reward) -> mv._WorkerPool:
    return mv._get_pool(reward.workers, reward.memory_limit_mb)


def _children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _returns(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run in a thread: its result, or a failure if it is still running after HANG_S."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(out=fn(*args, **kwargs)), daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"no verdict after {HANG_S:.0f} s: the time limit did not end the comparison"
    return box["out"]


def _warm(reward):
    # Start the workers outside the timed part (start-up is not what the limit is about).
    assert reward(["\\boxed{\\sqrt{4}}"], answer=["2"]) == [1.0]


# Inputs that get stuck in C code (big integers) where no signal can interrupt them: only the kill helps.
STUCK_ANSWER = "x^2 = 9^{9^{9^{9}}}"
STUCK = "\\boxed{" + STUCK_ANSWER + "}"
STUCK_SUM = "\\boxed{\\sum_{n=1}^{10^{10}} n}"

PATHOLOGICAL = [
    pytest.param(STUCK, "x^2 = 3", 0.0, id="equation-with-power-tower"),
    pytest.param(STUCK_SUM, "5", 0.0, id="sum-to-10^10"),
    pytest.param("\\boxed{5^{5^{5^{5^{5}}}}}", "3", 0.0, id="power-tower"),
    pytest.param("\\boxed{10^{10^{10}}}", "10", 0.0, id="10^10^10"),
    pytest.param("\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}", "1", 0.0, id="5000-nested-braces"),
    pytest.param("\\boxed{" + "{" * 400 + "7" + "}" * 400 + "}", "7", 1.0, id="400-nested-braces-right-verdict"),
    pytest.param("\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}", "2", 0.0, id="nested-fractions"),
    pytest.param("x" * 200_000 + " \\boxed{4}", "4", 1.0, id="200KB-then-answer"),
    pytest.param("\\boxed{" + "1+" * 100_000 + "1}", "100001", 0.0, id="200KB-box"),
    pytest.param("\\boxed{" * 20_000, "1", 0.0, id="20k-unclosed-boxes"),
    pytest.param("the answer is wrong. " * 10_000 + "\\boxed{4}", "4", 1.0, id="10k-phrases"),
    pytest.param("Answer: 1\n" * 20_000 + "Answer: 2", "2", 1.0, id="20k-answer-lines"),
    pytest.param("<think>" * 50_000 + "</think>" * 50_000 + "\\boxed{3}", "3", 1.0, id="think-tag-flood"),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), PATHOLOGICAL)
def test_pathological_inputs_return_within_the_limit(completion, gold, expected):
    # The limit is tested by its verdict (a stuck comparison scores 0, the rest keep theirs), not by a stopwatch.
    reward = make_math_reward(timeout_s=TIMEOUT, workers=1)
    _warm(reward)
    assert _returns(reward, [completion], answer=[gold]) == [expected]


def test_time_limit_holds_from_a_non_main_thread():
    reward = make_math_reward(timeout_s=TIMEOUT, workers=1)
    _warm(reward)
    before = set(_pool(reward).worker_pids())
    out = _returns(reward, [STUCK, "\\boxed{x^2=3}"], answer=["x^2 = 3", "x^2 = 3"])  # from a non-main thread
    assert out == [0.0, 1.0]  # the comparison after the stuck one still ran, on a fresh worker
    # The stuck worker was killed and reaped; a replacement took its place.
    after = set(_pool(reward).worker_pids())
    assert before and not (before & after)
    assert not any(psutil.pid_exists(pid) for pid in before)  # killed *and* reaped (a zombie still has a pid)


def test_answers_match_time_limit_from_a_thread():
    ma.answers_match("\\sqrt{4}", "2", workers=1)  # warm
    pool = mv._get_pool(1, ma.DEFAULT_MEMORY_LIMIT_MB)
    before = set(pool.worker_pids())
    assert _returns(ma.answers_match, STUCK_ANSWER, "x^2=3", timeout_s=TIMEOUT, workers=1) is False
    assert before and not (before & set(pool.worker_pids()))  # the stuck worker was killed, not waited for


def test_no_stray_process_or_zombie_after_timeouts_and_close(fresh_workers):
    reward = make_math_reward(timeout_s=TIMEOUT, workers=2)
    _warm(reward)
    before = set(_pool(reward).worker_pids())
    assert reward([STUCK, STUCK_SUM], answer=["x^2=3", "2"]) == [0.0, 0.0]
    # The pool still answers, on the replacement workers; with a limit no load reaches (the same pool: its key is the
    # worker count and memory limit), so that a busy machine cannot turn this right answer into a timeout.
    assert make_math_reward(timeout_s=HANG_S, workers=2)(["\\boxed{\\sqrt{9}}"], answer=["3"]) == [1.0]
    assert before - set(_pool(reward).worker_pids()), "a worker was killed"
    assert len(_pool(reward).worker_pids()) == 2
    pids = set(_pool(reward).all_pids())  # the two workers and the warm spare
    assert len(pids) == 3
    children = _children()
    assert {p.pid for p in children} == pids, "only the live workers are children of this process"
    assert all(p.status() != psutil.STATUS_ZOMBIE for p in children)
    close_math_workers()
    time.sleep(0.2)
    assert not [p for p in _children() if p.pid in pids]
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert _children() == []


def test_no_temp_files_left_behind(tmp_path, monkeypatch):
    close_math_workers()  # workers started from here on see the new TMPDIR
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    reward = make_math_reward(timeout_s=TIMEOUT, workers=1)
    assert reward([STUCK], answer=["x^2=3"]) == [0.0]
    patient = make_math_reward(timeout_s=HANG_S, workers=1)  # the same pool, with a limit no load reaches
    assert patient(["\\boxed{\\frac{\\sqrt{8}}{2}}"], answer=["\\sqrt{2}"]) == [1.0]
    close_math_workers()
    assert list(tmp_path.iterdir()) == []


def test_a_worker_that_dies_is_replaced():
    reward = make_math_reward(timeout_s=TIMEOUT, workers=1)
    _warm(reward)
    (pid,) = _pool(reward).worker_pids()
    psutil.Process(pid).kill()
    psutil.Process(pid).wait(5)
    assert reward(["\\boxed{\\sqrt{16}}"], answer=["4"]) == [1.0]
    assert _pool(reward).worker_pids() != [pid]


def test_concurrent_calls_from_several_threads():
    reward = make_math_reward(timeout_s=3.0, workers=2)
    results: dict[int, list] = {}

    def run(i: int):
        results[i] = reward([f"\\boxed{{\\sqrt{{{i * i}}}}}", "\\boxed{0}"], answer=[str(i), str(i)])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {i: [1.0, 0.0] for i in range(1, 6)}


def test_gold_is_parsed_once_per_group_and_work_is_spread_over_workers():
    reward = make_math_reward(timeout_s=3.0, workers=2)
    gold = "The side is $\\boxed{\\frac{\\sqrt{3}}{2}}$."
    group = [f"\\boxed{{\\frac{{\\sqrt{{3}}}}{{{k}}}}}" for k in range(2, 18)]  # 16 distinct predictions
    ma._prepare_gold.cache_clear()
    _warm(reward)
    before = _pool(reward).stats()
    out = reward(group, solution=[gold] * len(group))
    assert out == [1.0] + [0.0] * 15
    info = ma._prepare_gold.cache_info()
    assert info.misses == 2 and info.hits == len(group) - 1  # parent side: the gold is prepared once (+1: warm-up)
    stats = [(a - a0, b - b0) for (a, b), (a0, b0) in zip(_pool(reward).stats(), before, strict=True)]
    gold_parses = sum(s[0] for s in stats)
    pred_checks = [s[1] for s in stats]
    assert 1 <= gold_parses <= reward.workers < len(group)  # worker side: once per worker, not once per completion
    assert sum(pred_checks) == 15  # the exact match was settled without sympy
    assert len(pred_checks) == 2 and min(pred_checks) > 0  # both workers got a share


def test_repeated_predictions_are_checked_once():
    reward = make_math_reward(timeout_s=3.0, workers=1)
    _warm(reward)
    before = sum(s[1] for s in _pool(reward).stats())
    out = reward(["\\boxed{\\sqrt{2}\\cdot\\sqrt{2}}"] * 8, answer=["2"] * 8)
    assert out == [1.0] * 8
    assert sum(s[1] for s in _pool(reward).stats()) - before == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_default_worker_count_follows_the_cores():
    assert 1 <= mv._default_workers() <= min(4, len(os.sched_getaffinity(0)))


def test_an_interrupted_batch_leaves_the_pool_usable(monkeypatch):
    reward = make_math_reward(timeout_s=3.0, workers=1)
    _warm(reward)
    real_handle = mv._WorkerPool._handle

    def interrupt_on_first_verdict(self, w, line, *args):
        if line.startswith("V "):
            raise KeyboardInterrupt
        return real_handle(self, w, line, *args)

    monkeypatch.setattr(mv._WorkerPool, "_handle", interrupt_on_first_verdict)
    with pytest.raises(KeyboardInterrupt):
        reward(["\\boxed{\\sqrt{25}}", "\\boxed{\\sqrt{36}}"], answer=["5", "5"])
    monkeypatch.setattr(mv._WorkerPool, "_handle", real_handle)
    assert reward(["\\boxed{\\sqrt{49}}", "\\boxed{\\sqrt{36}}"], answer=["7", "7"]) == [1.0, 0.0]
