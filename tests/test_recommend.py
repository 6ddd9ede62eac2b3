"""`trl-dapo profile`'s mode recommendation (trl_dapo_ext/preflight/recommend.py): its costs against a simulation,
and each branch of the rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.preflight.difficulty import prompt_stats, summarize
from trl_dapo_ext.preflight.recommend import MIN_SAVING, recommend_mode


@settings(max_examples=20, deadline=None)
@given(rates=st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_size=2, max_size=6), G=st.sampled_from([4, 8]))
def test_grpo_cost_matches_simulated_groups(rates, G):
    """G / (share of mixed groups), against groups of G drawn from the pass rates."""
    choice = recommend_mode(rates, G)
    rng = np.random.default_rng(0)
    draws = rng.random((20_000, len(rates), G)) < np.asarray(rates)[None, :, None]
    mixed = (draws.any(axis=2) & ~draws.all(axis=2)).mean()
    if mixed == 0:
        assert math.isinf(choice.costs["grpo"])
    else:
        assert choice.costs["grpo"] == pytest.approx(G / mixed, rel=0.03)
        assert choice.costs["refill"] == choice.costs["grpo"]  # refill generates full groups too


def test_screening_when_most_groups_are_zero_variance():
    choice = recommend_mode([1.0] * 40 + [0.0] * 30 + [0.5] * 30, group_size=8)
    assert choice.mode == "screening at GRPO budget"
    assert choice.config == {
        "dynamic_sampling": True,
        "dynamic_sampling_screen_generations": min(
            (k for k in (2, 4)), key=lambda k: choice.costs[f"screening k={k}"]
        ),
        "dynamic_sampling_fixed_budget": True,
    }
    assert choice.zero_variance_share == pytest.approx(0.7 + 0.3 * 2 / 256)
    assert "zero-variance" in choice.reason and "GRPO" in choice.reason


def test_plain_grpo_when_screening_saves_little():
    choice = recommend_mode([0.5] * 10, group_size=8)  # 0.8% of groups zero-variance
    assert choice.mode == "plain GRPO" and choice.config == {"dynamic_sampling": False}
    saving = 1 - min(v for k, v in choice.costs.items() if k.startswith("screening")) / choice.costs["grpo"]
    assert saving < MIN_SAVING and f"{MIN_SAVING:.0%}" in choice.reason


def test_no_mode_helps_when_no_group_can_be_mixed():
    choice = recommend_mode([0.0, 1.0, 0.0], group_size=8)
    assert choice.mode == "no mode can help" and "keep-band" in choice.reason
    assert all(math.isinf(cost) for cost in choice.costs.values())


def test_graded_rewards_get_plain_grpo_with_a_note():
    choice = recommend_mode([1.0, 0.0, 0.5], group_size=4, binary=False)
    assert choice.mode == "plain GRPO" and "graded" in choice.reason


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="group_size"):
        recommend_mode([0.5], group_size=1)
    with pytest.raises(ValueError, match="no pass rates"):
        recommend_mode([], group_size=8)


def test_the_profile_summary_carries_the_recommendation():
    rows = [[1] * 8, [0] * 8] * 3 + [[1, 0] * 4]  # 6 prompts always right or wrong, 1 at pass rate 1/2
    stats = [prompt_stats(i, r, [3] * 8, [False] * 8, group_size=8) for i, r in enumerate(rows)]
    recommendation = summarize(stats, group_size=8)["recommendation"]
    assert recommendation["mode"] == "screening at GRPO budget"
    costs = recommendation["completions_per_informative_group"]
    assert set(costs) == {"grpo", "refill", "screening k=2", "screening k=4"}
    assert costs["grpo"] == pytest.approx(8 * 7 / (1 - 2 / 256), abs=0.01)
    # with G = 4, 2 probes are half a group: screening saves too little to switch on
    four = summarize([prompt_stats(i, r[:4], [3] * 4, [False] * 4, 4) for i, r in enumerate(rows)], 4)
    assert four["recommendation"]["mode"] == "plain GRPO"
