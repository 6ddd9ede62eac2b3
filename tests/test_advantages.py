"""Advantage estimators: worked numbers (docs/estimators.md), a brute-force reference, TRL parity and properties."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.utils import nanstd as trl_nanstd

from trl_dapo_ext.core.advantages import combine_rewards, group_advantages, nan_std

NAN = float("nan")


# --- Worked examples: GRPO's advantage (DeepSeekMath Sec. 4.1.2), leave-one-out (Kool et al. 2019) ------------------


def test_seed_four_sample_group_population_std():
    # mu = 0.50, sigma = 0.25 -> (-1, 1, 1, -1)
    rewards = torch.tensor([0.25, 0.75, 0.75, 0.25])
    assert group_advantages(rewards, 4, std="population", eps=0.0).tolist() == [-1.0, 1.0, 1.0, -1.0]


def test_seed_four_sample_group_leave_one_out():
    # b_{-1} = (0.75 + 0.75 + 0.25) / 3 = 7/12, A_1 = 1/4 - 7/12 = -1/3
    rewards = torch.tensor([0.25, 0.75, 0.75, 0.25], dtype=torch.float64)
    expected = torch.tensor([-1 / 3, 1 / 3, 1 / 3, -1 / 3], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(rewards, 4, estimator="loo", scale="none"), expected)


def test_seed_binary_group():
    # C = 3 of G = 4, p = 3/4: success sqrt((1-p)/p) = 1/sqrt(3), failure -sqrt(p/(1-p)) = -sqrt(3)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    success, failure = 1 / math.sqrt(3), -math.sqrt(3)
    expected = torch.tensor([success, failure, success, success], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(rewards, 4, std="population", eps=0.0), expected)
    # Divisor G-1 multiplies these by sqrt((G-1)/G).
    torch.testing.assert_close(group_advantages(rewards, 4, std="sample", eps=0.0), expected * math.sqrt(3 / 4))


def test_seed_binary_group_has_unit_second_moment():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    advantages = group_advantages(rewards, 8, std="population", eps=0.0)
    torch.testing.assert_close(advantages.mean(), torch.tensor(0.0, dtype=torch.float64))
    torch.testing.assert_close((advantages**2).mean(), torch.tensor(1.0, dtype=torch.float64))


def test_default_eps_is_a_stabiliser_not_a_floor():
    # TRL's convention: (r - mean) / (std + 1e-4), so the +-1 of the first example become +-0.25 / 0.2501.
    rewards = torch.tensor([0.25, 0.75, 0.75, 0.25])
    magnitude = 0.25 / 0.2501
    expected = [-magnitude, magnitude, magnitude, -magnitude]
    assert group_advantages(rewards, 4, std="population").tolist() == pytest.approx(expected, rel=1e-6)


# --- Brute-force reference ------------------------------------------------------------------------------------------


def reference_advantages(rewards, group_size, estimator, scale, std, eps):
    """Python-float loops over the definitions, independent of the tensor implementation."""

    def spread(values):
        values = [v for v in values if not math.isnan(v)]
        n = len(values)
        if std == "sample" and n < 2 or n == 0:
            return math.nan
        mean = sum(values) / n
        divisor = n - 1 if std == "sample" else n
        return math.sqrt(sum((v - mean) ** 2 for v in values) / divisor)

    batch_spread = spread(rewards)
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        scorable = [v for v in group if not math.isnan(v)]
        for i, r in enumerate(group):
            if math.isnan(r) or len(set(scorable)) < 2:  # unscorable, or the zero-variance branch
                out.append(0.0)
                continue
            others = [v for j, v in enumerate(group) if j != i and not math.isnan(v)]
            if estimator == "grpo":
                baseline = sum(scorable) / len(scorable)
            elif others:
                baseline = sum(others) / len(others)
            else:
                out.append(0.0)
                continue
            centred = r - baseline
            if scale == "none":
                out.append(centred)
                continue
            s = spread(group) if scale == "group" else batch_spread
            out.append(0.0 if math.isnan(s) or s + eps == 0 else centred / (s + eps))
    return out


COMBINATIONS = list(
    itertools.product(["grpo", "loo"], ["group", "batch", "none"], ["sample", "population"], [0.0, 1e-4])
)

# Mostly binary rewards (ties and zero-variance groups are the interesting cases), some dense, some unscorable.
reward_values = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-5, 5), st.just(NAN))


@pytest.mark.parametrize("estimator,scale,std,eps", COMBINATIONS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_matches_brute_force(estimator, scale, std, eps, data):
    group_size = data.draw(st.integers(1, 5))
    num_groups = data.draw(st.integers(1, 4))
    size = group_size * num_groups
    values = data.draw(st.lists(reward_values, min_size=size, max_size=size))
    rewards = torch.tensor(values, dtype=torch.float64)
    got = group_advantages(rewards, group_size, estimator=estimator, scale=scale, std=std, eps=eps)
    expected = reference_advantages(values, group_size, estimator, scale, std, eps)
    assert got.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-9)


# --- Properties -------------------------------------------------------------------------------------------------------

groups = st.integers(2, 8).flatmap(
    lambda g: st.tuples(
        st.just(g), st.lists(st.floats(-10, 10), min_size=g, max_size=g * 5).filter(lambda v: len(v) % g == 0)
    )
)


@settings(max_examples=100, deadline=None)
@given(groups)
def test_loo_is_rescaled_centred_reward(case):
    group_size, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    loo = group_advantages(rewards, group_size, estimator="loo", scale="none")
    centred = group_advantages(rewards, group_size, estimator="grpo", scale="none")
    torch.testing.assert_close(loo, centred * group_size / (group_size - 1))


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 8), st.integers(1, 5), st.floats(-10, 10), st.sampled_from(COMBINATIONS))
def test_uniform_groups_give_zero(group_size, num_groups, value, combination):
    estimator, scale, std, eps = combination
    rewards = torch.full((group_size * num_groups,), value, dtype=torch.float64)
    advantages = group_advantages(rewards, group_size, estimator=estimator, scale=scale, std=std, eps=eps)
    assert torch.all(advantages.abs() < 1e-9), advantages


@settings(max_examples=100, deadline=None)
@given(groups, st.data(), st.sampled_from(COMBINATIONS))
def test_nan_rows_never_poison_a_group(case, data, combination):
    group_size, values = case
    estimator, scale, std, eps = combination
    nan_rows = data.draw(st.sets(st.integers(0, len(values) - 1)))
    poisoned = [NAN if i in nan_rows else v for i, v in enumerate(values)]
    advantages = group_advantages(torch.tensor(poisoned, dtype=torch.float64), group_size, estimator, scale, std, eps)
    assert torch.isfinite(advantages).all()
    assert all(advantages[i] == 0 for i in nan_rows)
    if scale != "batch":
        # A group's advantages depend only on its own scorable members: dropping the NaN rows changes nothing.
        for start in range(0, len(values), group_size):
            kept = [v for v in poisoned[start : start + group_size] if not math.isnan(v)]
            if len(kept) < 2:
                continue
            alone = group_advantages(torch.tensor(kept, dtype=torch.float64), len(kept), estimator, scale, std, eps)
            in_batch = [
                a
                for a, v in zip(advantages[start : start + group_size].tolist(), poisoned[start : start + group_size])
                if not math.isnan(v)
            ]
            assert in_batch == pytest.approx(alone.tolist(), abs=1e-9)


def test_single_scorable_member_gets_zero_with_loo():
    rewards = torch.tensor([NAN, 1.0, NAN, NAN, 0.0, 1.0, 1.0, 0.0])
    advantages = group_advantages(rewards, 4, estimator="loo", scale="none")
    assert advantages[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert advantages[4:].tolist() == pytest.approx([-2 / 3, 2 / 3, 2 / 3, -2 / 3])


# --- TRL parity -------------------------------------------------------------------------------------------------------


def trl_advantages(rewards, group_size, scale):
    """The arithmetic of GRPOTrainer._generate_and_score_completions (TRL 1.16, sum_then_normalize)."""
    mean = torch.nanmean(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    if scale in ["group", "none"]:
        std = trl_nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    else:
        std = trl_nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@settings(max_examples=60, deadline=None)
@given(case=groups, nan_mask=st.lists(st.booleans(), min_size=40, max_size=40))
def test_defaults_are_bit_identical_to_trl(scale, case, nan_mask):
    group_size, values = case
    rewards = torch.tensor([NAN if m else v for v, m in zip(values, nan_mask)], dtype=torch.float32)
    ours, theirs = group_advantages(rewards, group_size, scale=scale), trl_advantages(rewards, group_size, scale)
    grouped = rewards.view(-1, group_size)
    uniform = [len(set(g[~torch.isnan(g)].tolist())) <= 1 for g in grouped]
    for index, is_uniform in enumerate(uniform):
        rows = slice(index * group_size, (index + 1) * group_size)
        if is_uniform:  # the documented difference: exact zeros where TRL may keep rounding noise
            assert torch.all(ours[rows] == 0)
        else:
            assert torch.equal(ours[rows], theirs[rows])


def test_uniform_group_is_exactly_zero_where_trl_leaks_rounding_noise():
    rewards = torch.full((6,), 51 / 97, dtype=torch.float32)  # six equal rewards whose float32 mean is off by an ulp
    assert trl_advantages(rewards, 6, "group").abs().min() > 1e-4
    assert torch.all(group_advantages(rewards, 6) == 0)


def test_nan_std_sample_matches_trl():
    values = torch.tensor([[0.1, 0.7, NAN, 0.3], [1.0, NAN, NAN, NAN]])
    ours, theirs = nan_std(values, dim=1), trl_nanstd(values, dim=1)
    assert torch.equal(ours[0], theirs[0]) and torch.isnan(ours[1]) and torch.isnan(theirs[1])


def test_combine_rewards_marks_only_fully_unscorable_rows():
    per_func = torch.tensor([[1.0, -0.5], [NAN, -0.25], [NAN, NAN]])
    combined = combine_rewards(per_func, torch.tensor([2.0, 1.0]))
    assert combined[:2].tolist() == [1.5, -0.25]
    assert math.isnan(combined[2])


# --- Bad input --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"estimator": "rloo"}, "estimator must be one of"),
        ({"scale": "global"}, "scale must be one of"),
        ({"std": "unbiased"}, "std must be one of"),
        ({"eps": -1.0}, "eps must be >= 0"),
        ({"num_generations": 3}, "do not split into groups"),
        ({"num_generations": 0}, "positive int"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    arguments = {"rewards": torch.zeros(8), "num_generations": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        group_advantages(**arguments)


def test_rejects_integer_and_2d_rewards():
    with pytest.raises(ValueError, match="float tensor"):
        group_advantages(torch.zeros(8, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="flat"):
        group_advantages(torch.zeros(2, 4), 4)
