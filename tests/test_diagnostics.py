"""Diagnostics: every metric on hand-made groups with known answers, pass@k against brute force, NaN and edges."""

from __future__ import annotations

import ast
import itertools
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.core import metrics as diagnostics
from trl_dapo_ext.core.advantages import group_advantages
from trl_dapo_ext.core.groups import ALL_MAX, ALL_MIN, MIXED, UNSCORABLE, success_outcomes
from trl_dapo_ext.core.metrics import (
    StepTimer,
    allocated_memory_gb,
    completion_lengths,
    generation_cost,
    group_metrics,
    length_metrics,
    pass_at_k,
    peak_memory_gb,
    time_split,
    token_metrics,
    truncated_completions,
)
from trl_dapo_ext.core.overlong import overlong_penalty
from trl_dapo_ext.metric_names import N

NAN = float("nan")


def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


# ------------------------------------------------------------------------------------------------ group outcomes


def test_success_outcomes_known_groups():
    rewards = _t(
        *[1, 1, 1],  # all correct
        *[0, 0, 0],  # all wrong
        *[1, 0, 1],  # mixed
        *[0.5, 0.5, 0.5],  # constant below the threshold: no contrast, not a success
        *[NAN, 1, 1],  # constant among the scorable ones
        *[NAN, NAN, 0],  # one scorable member: no contrast
        *[NAN, NAN, NAN],  # nothing to judge
        *[0.2, 0.7, NAN],  # contrast among the scorable ones
    )
    assert success_outcomes(rewards, 3).tolist() == [
        ALL_MAX,
        ALL_MIN,
        MIXED,
        ALL_MIN,
        ALL_MAX,
        ALL_MIN,
        UNSCORABLE,
        MIXED,
    ]


def test_success_outcomes_threshold_and_tolerance():
    rewards = _t(0.5, 0.5, 0.8, 0.8005)
    assert success_outcomes(rewards, 2).tolist() == [ALL_MIN, MIXED]
    assert success_outcomes(rewards, 2, success_threshold=0.5).tolist() == [ALL_MAX, MIXED]
    assert success_outcomes(rewards, 2, success_threshold=0.5, tol=1e-3).tolist() == [ALL_MAX, ALL_MAX]
    assert success_outcomes(rewards, 2, success_threshold=0.9, tol=1e-3).tolist() == [ALL_MIN, ALL_MIN]
    assert success_outcomes(rewards, 2, tol=0.0).tolist() == [ALL_MIN, MIXED]  # a constant group never has contrast


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, NAN]), min_size=2, max_size=24), st.sampled_from([1, 2, 3, 4]))
def test_mixed_exactly_where_grpo_gives_an_advantage(values, num_generations):
    """A group counts as mixed iff GRPO's advantages give some sibling a non-zero signal."""
    values = values[: len(values) // num_generations * num_generations]
    if not values:
        return
    rewards = torch.tensor(values, dtype=torch.float32)
    outcome = success_outcomes(rewards, num_generations)
    advantages = group_advantages(rewards, num_generations).view(-1, num_generations)
    assert ((outcome == MIXED) == (advantages != 0).any(dim=1)).all()


# ------------------------------------------------------------------------------------------------ group metrics


def test_group_metrics_known_values():
    rewards = _t(
        *[1, 1, 1, 1],
        *[0, 0, 0, 0],
        *[1, 0, 0, 0],
        *[1, 1, 0, 0],
    )
    m = group_metrics(rewards, 4)
    assert m[N.GROUPS_FRAC_ALL_MAX] == 0.25
    assert m[N.GROUPS_FRAC_ALL_MIN] == 0.25
    assert m[N.GROUPS_FRAC_MIXED] == 0.5
    # Sample std: 0, 0, sqrt(0.75 * 4/3 / 4)... computed directly: [1,0,0,0] -> sqrt(0.25), [1,1,0,0] -> sqrt(1/3).
    stds = sorted([0.0, 0.0, 0.5, math.sqrt(1 / 3)])
    assert m[N.GROUPS_REWARD_STD_MEAN] == pytest.approx(sum(stds) / 4)
    assert m[N.GROUPS_REWARD_STD_P50] == pytest.approx((stds[1] + stds[2]) / 2)  # linear interpolation
    assert m[N.GROUPS_REWARD_STD_P10] == pytest.approx(0.0)
    assert m[N.GROUPS_REWARD_STD_P90] == pytest.approx(stds[2] + 0.7 * (stds[3] - stds[2]))
    assert m[N.GROUPS_PASS_AT_1] == pytest.approx((1 + 0 + 0.25 + 0.5) / 4)
    assert m[N.GROUPS_PASS_AT_K] == pytest.approx(0.75)  # k = G = 4: a group passes iff it has any correct sample
    assert set(m) == {
        N.GROUPS_FRAC_ALL_MAX,
        N.GROUPS_FRAC_ALL_MIN,
        N.GROUPS_FRAC_MIXED,
        N.GROUPS_REWARD_STD_MEAN,
        N.GROUPS_REWARD_STD_P10,
        N.GROUPS_REWARD_STD_P50,
        N.GROUPS_REWARD_STD_P90,
        N.GROUPS_PASS_AT_1,
        N.GROUPS_PASS_AT_K,
    }


def test_group_metrics_population_std_and_custom_k():
    m = group_metrics(_t(1, 1, 0, 0), 4, std="population", k=2)
    assert m[N.GROUPS_REWARD_STD_MEAN] == pytest.approx(0.5)
    assert m[N.GROUPS_PASS_AT_K] == pytest.approx(1 - math.comb(2, 2) / math.comb(4, 2))


def test_group_metrics_nan_members_and_unscorable_groups():
    rewards = _t(
        *[NAN, NAN, NAN],  # left out of every fraction and spread
        *[1, NAN, 0],  # 2 scorable, 1 correct
        *[NAN, 1, NAN],  # 1 scorable: no spread, all correct; too few samples for pass@3
    )
    m = group_metrics(rewards, 3)
    assert m[N.GROUPS_FRAC_ALL_MAX] == 0.5
    assert m[N.GROUPS_FRAC_MIXED] == 0.5
    assert m[N.GROUPS_FRAC_ALL_MIN] == 0.0
    assert m[N.GROUPS_REWARD_STD_MEAN] == pytest.approx(math.sqrt(0.5) / 2)
    assert m[N.GROUPS_PASS_AT_1] == pytest.approx((0.5 + 1.0) / 2)
    # k = 3 > scorable samples in every group: pass@k is undefined, logged as NaN (TRL's log() drops it).
    assert math.isnan(m[N.GROUPS_PASS_AT_K])
    assert group_metrics(rewards, 3, k=2)[N.GROUPS_PASS_AT_K] == pytest.approx(1.0)


def test_group_metrics_all_unscorable_is_nan():
    m = group_metrics(_t(NAN, NAN, NAN, NAN), 2)
    assert all(math.isnan(value) for value in m.values())


def test_group_metrics_single_generation_groups():
    m = group_metrics(_t(1, 0, 1, 0.5), 1, k=1)
    assert m[N.GROUPS_FRAC_MIXED] == 0.0  # one sample per prompt has no within-group contrast
    assert m[N.GROUPS_FRAC_ALL_MAX] == 0.5
    assert m[N.GROUPS_FRAC_ALL_MIN] == 0.5
    assert m[N.GROUPS_REWARD_STD_MEAN] == 0.0
    assert m[N.GROUPS_PASS_AT_1] == m[N.GROUPS_PASS_AT_K] == 0.5


@pytest.mark.parametrize(
    "rewards, num_generations, kwargs",
    [
        (_t(1, 0, 1), 2, {}),  # not whole groups
        (_t(1, 0), 0, {}),
        (torch.tensor([1, 0]), 2, {}),  # integer rewards cannot hold NaN
        (_t(1, 0).view(1, 2), 2, {}),
        (_t(1, 0), 2, {"k": 3}),
        (_t(1, 0), 2, {"k": 0}),
    ],
)
def test_group_metrics_rejects_bad_input(rewards, num_generations, kwargs):
    with pytest.raises(ValueError):
        group_metrics(rewards, num_generations, **kwargs)


# --------------------------------------------------------------------------------------------------------- pass@k


def _brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c correct) that contain at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pass_at_k_matches_brute_force(data):
    n = data.draw(st.integers(1, 12))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    estimate = pass_at_k(torch.tensor([n]), torch.tensor([c]), k).item()
    assert estimate == pytest.approx(_brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_is_stable_for_large_groups():
    # C(512, 256) overflows float64; the product form stays exact at the ends and within [0, 1].
    n = torch.tensor([512, 512, 512, 512])
    c = torch.tensor([0, 1, 256, 512])
    estimate = pass_at_k(n, c, 256)
    assert estimate[0] == 0.0 and estimate[3] == 1.0
    assert estimate[1] == pytest.approx(0.5)  # one correct sample lands in half of the subsets
    assert 0.0 <= estimate[2] <= 1.0


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError):
        pass_at_k(torch.tensor([2]), torch.tensor([3]), 1)
    with pytest.raises(ValueError):
        pass_at_k(torch.tensor([2]), torch.tensor([1]), 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0, NAN]), min_size=4, max_size=4), min_size=1, max_size=6))
def test_group_pass_at_k_matches_brute_force_per_group(groups):
    rewards = torch.tensor([r for g in groups for r in g], dtype=torch.float32)
    expected_1, expected_2 = [], []
    for g in groups:
        scorable = [r for r in g if not math.isnan(r)]
        if scorable:
            expected_1.append(_brute_force_pass_at_k(len(scorable), int(sum(scorable)), 1))
        if len(scorable) >= 2:
            expected_2.append(_brute_force_pass_at_k(len(scorable), int(sum(scorable)), 2))
    m = group_metrics(rewards, 4, k=2)
    for key, expected in ((N.GROUPS_PASS_AT_1, expected_1), (N.GROUPS_PASS_AT_K, expected_2)):
        if expected:
            assert m[key] == pytest.approx(sum(expected) / len(expected))
        else:
            assert math.isnan(m[key])


# ---------------------------------------------------------------------------------------------------------- length


def test_length_metrics_known_values():
    # L_max = 10, L_cache = 4: the buffer is 7..10.
    lengths = torch.tensor([3, 6, 7, 9, 10, 10])
    truncated = torch.tensor([False, False, False, False, False, True])
    rewards = _t(1, 0, 1, NAN, 1, 0)
    penalty = overlong_penalty(lengths, max_length=10, buffer_length=4)
    m = length_metrics(lengths, truncated, task_rewards=rewards, penalty=penalty, max_length=10, buffer_length=4)
    assert m[N.LENGTH_TRUNCATED_FRAC] == pytest.approx(1 / 6)
    assert m[N.LENGTH_IN_BUFFER_FRAC] == pytest.approx(4 / 6)  # 6 is the last free length; 10 is inside
    assert m[N.LENGTH_TASK_ACCURACY] == pytest.approx(3 / 5)  # the NaN row is not scorable
    assert m[N.LENGTH_OVERLONG_PENALTY_MEAN] == pytest.approx((0 + 0 - 0.25 - 0.75 - 1 - 1) / 6)
    assert m[N.LENGTH_SHAPED_REWARD_MEAN] == pytest.approx((1 + 0 + 0.75 + 0 - 1) / 5)


def test_length_metrics_leaves_out_what_does_not_apply():
    m = length_metrics(torch.tensor([3, 8]), torch.tensor([False, True]))
    assert m == {N.LENGTH_TRUNCATED_FRAC: 0.5}
    m = length_metrics(torch.tensor([3, 8]), torch.tensor([False, True]), task_rewards=_t(1, 0))
    assert set(m) == {N.LENGTH_TRUNCATED_FRAC, N.LENGTH_TASK_ACCURACY}


def test_length_metrics_threshold_and_all_unscorable():
    m = length_metrics(
        torch.tensor([3, 8]), torch.tensor([False, False]), task_rewards=_t(0.7, 0.2), success_threshold=0.5
    )
    assert m[N.LENGTH_TASK_ACCURACY] == 0.5
    m = length_metrics(torch.tensor([3]), torch.tensor([False]), task_rewards=_t(NAN), penalty=_t(0.0))
    assert math.isnan(m[N.LENGTH_TASK_ACCURACY]) and math.isnan(m[N.LENGTH_SHAPED_REWARD_MEAN])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 24), min_size=1, max_size=30), st.integers(1, 20))
def test_in_buffer_frac_agrees_with_the_penalty_zone(lengths, buffer_length):
    """Inside the buffer exactly where DAPO Eq. 13 charges a partial or full penalty without exceeding L_max."""
    max_length = 20
    lengths = torch.tensor(lengths)
    penalty = overlong_penalty(lengths, max_length, buffer_length)
    m = length_metrics(lengths, lengths >= max_length, max_length=max_length, buffer_length=buffer_length)
    expected = ((penalty < 0) & (lengths <= max_length)).float().mean().item()
    assert m[N.LENGTH_IN_BUFFER_FRAC] == pytest.approx(expected)


def test_completion_lengths_count_the_models_tokens_as_trl_does():
    ids = [[7, 7, 2], [7, 8, 8, 7, 7], [7] * 6]  # EOS = 2; the last two rows hit the cap
    assert completion_lengths(ids).tolist() == [3, 5, 6]
    mask = [[1, 1, 1], [1, 0, 0, 1, 1], [1, 1, 0, 0, 1, 1]]  # tool output: 2 tokens in each of the last two
    assert completion_lengths(ids, mask).tolist() == [3, 3, 4]
    assert truncated_completions(ids, stop_ids={2, 0}).tolist() == [False, True, True]
    with pytest.raises(ValueError, match="2 tool-mask rows for 3 completions"):
        completion_lengths(ids, mask[:2])


def test_length_metrics_rejects_bad_input():
    with pytest.raises(ValueError, match="same length"):
        length_metrics(torch.tensor([1, 2]), torch.tensor([False]))
    with pytest.raises(ValueError, match="both"):
        length_metrics(torch.tensor([1]), torch.tensor([False]), max_length=10)


# ------------------------------------------------------------------------------------------------------------ cost


def test_token_metrics_known_values():
    prompt = torch.tensor([[0, 0, 1], [1, 1, 1]])  # 2 pads
    completion = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])  # 3 pads
    loss = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0]])  # first row truncated and masked
    m = token_metrics(prompt, completion, loss)
    assert m == {N.COST_USEFUL_TOKEN_FRAC: pytest.approx(1 / 14), N.COST_PADDED_TOKEN_FRAC: pytest.approx(5 / 14)}
    assert token_metrics(prompt, completion)[N.COST_USEFUL_TOKEN_FRAC] == pytest.approx(5 / 14)


def test_token_metrics_loss_outside_real_tokens_is_not_useful():
    completion = torch.tensor([[1, 0]])
    m = token_metrics(torch.ones(1, 1), completion, loss_mask=torch.tensor([[1, 1]]))
    assert m[N.COST_USEFUL_TOKEN_FRAC] == pytest.approx(1 / 3)


def test_token_metrics_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        token_metrics(torch.ones(2, 3), torch.ones(3, 4))
    with pytest.raises(ValueError):
        token_metrics(torch.ones(2, 3), torch.ones(2, 4), loss_mask=torch.ones(2, 3))


def test_generation_cost():
    assert generation_cost(1200, 3) == {N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP: 400.0}
    assert math.isnan(generation_cost(1200, 0)[N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP])
    with pytest.raises(ValueError):
        generation_cost(-1, 2)


def test_peak_memory_is_none_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert peak_memory_gb() is None and allocated_memory_gb() is None


def test_memory_readings_never_reset_the_cuda_counter(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2**30)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append(device))
    assert peak_memory_gb() == 3.0 and allocated_memory_gb() == 1.0
    assert calls == []


# ------------------------------------------------------------------------------------------------------------ time


def test_time_split_known_values():
    m = time_split({"generation": 5.0, "reward": 1.0, "update": 3.0}, 10.0)
    assert m[N.TIME_OTHER_S] == pytest.approx(1.0)
    assert m[N.TIME_GENERATION_FRAC] == pytest.approx(0.5)
    fractions = [v for k, v in m.items() if k.endswith("_frac")]
    assert sum(fractions) == pytest.approx(1.0)


def test_time_split_edges():
    assert time_split({"generation": 2.0}, 1.9)[N.TIME_OTHER_S] == 0.0  # never negative
    assert time_split({"generation": 0.0}, 0.0) == {N.TIME_GENERATION_S: 0.0, N.TIME_OTHER_S: 0.0}
    with pytest.raises(ValueError):
        time_split({"other": 1.0}, 2.0)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def test_step_timer_charges_the_innermost_section():
    clock = FakeClock()
    timer = StepTimer(clock=clock)
    clock.advance(1.0)  # other
    with timer.section("generation"):
        clock.advance(4.0)
        with timer.section("reward"):
            clock.advance(2.0)
        clock.advance(1.0)
    with timer.section("update"):
        clock.advance(3.0)
    with timer.section("generation"):  # sections accumulate
        clock.advance(1.0)
    m = timer.metrics()
    assert m[N.TIME_GENERATION_S] == 6.0
    assert m[N.TIME_REWARD_S] == 2.0
    assert m[N.TIME_UPDATE_S] == 3.0
    assert m[N.TIME_OTHER_S] == 1.0
    assert m[N.TIME_GENERATION_FRAC] == pytest.approx(0.5)
    # metrics() reset the timer.
    clock.advance(2.0)
    assert timer.metrics() == {
        N.TIME_GENERATION_S: 0.0,
        N.TIME_REWARD_S: 0.0,
        N.TIME_UPDATE_S: 0.0,
        N.TIME_OTHER_S: 2.0,
        N.TIME_GENERATION_FRAC: 0.0,
        N.TIME_REWARD_FRAC: 0.0,
        N.TIME_UPDATE_FRAC: 0.0,
        N.TIME_OTHER_FRAC: 1.0,
    }


def test_step_timer_counts_a_section_that_raised_and_rejects_open_sections():
    clock = FakeClock()
    timer = StepTimer(sections=(), clock=clock)
    with pytest.raises(KeyError), timer.section("reward"):
        clock.advance(2.0)
        raise KeyError("verifier crashed")
    assert timer.metrics(reset=False)[N.TIME_REWARD_S] == 2.0
    with timer.section("update"), pytest.raises(RuntimeError, match="open"):
        timer.metrics()


# ---------------------------------------------------------------------------------------------------------- module


def test_diagnostics_imports_only_torch_and_the_pure_modules():
    tree = ast.parse(Path(diagnostics.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or "").split(".")[0])
    assert imported <= {
        "__future__",
        "time",
        "collections",
        "contextlib",
        "torch",
        ".advantages",
        ".groups",
        "..metric_names",
    }, imported
