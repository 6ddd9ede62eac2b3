"""`trl-dapo profile`'s mode recommendation (trl_dapo_ext/preflight/recommend.py): its costs against a simulation
and against `probe_rule_bound`, its estimates against the plug-in bias of c/K, its intervals' coverage, and each
branch of the rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.dynamic_sampling.screening import mixed_chance, probe_rule_bound
from trl_dapo_ext.preflight.difficulty import prompt_stats, summarize
from trl_dapo_ext.preflight.recommend import (
    EVIDENCE,
    MEASURED_PROBES,
    MIN_SAVING,
    NO_DIFFERENCE,
    SETTING,
    STUDY,
    _costs,
    power_estimates,
    recommend_mode,
)

G = 8


def _profile_saving(successes: np.ndarray, samples: int) -> float:
    """Screening's saving as `trl-dapo profile` reports it: through prompt_stats and summarize."""
    stats = [prompt_stats(i, [1.0] * c + [0.0] * (samples - c), [3] * samples, [False] * samples, G)
             for i, c in enumerate(successes)]  # fmt: skip
    costs = summarize(stats, G)["recommendation"]["completions_per_informative_group"]
    return 1.0 - costs["screening k=4"] / costs["grpo"]


def _population(size: int, rng: np.random.Generator) -> np.ndarray:
    """40% of the prompts never solved, the rest mostly hard (Beta(1, 5)): screening saves about 12%."""
    p = rng.beta(1.0, 5.0, size)
    p[: size * 2 // 5] = 0.0
    return p


def _true_saving(p: np.ndarray) -> float:
    grpo = G / float(np.mean(mixed_chance(p, G)))
    return 1.0 - probe_rule_bound(p, MEASURED_PROBES, G)[0] / grpo


def test_the_saving_is_estimated_without_the_plug_in_bias():
    """With K = G = 8 samples per prompt, c/K read a true 12% saving as about 20% (above the 15% threshold); the
    profile's estimate is centred on the truth, and recommends plain GRPO."""
    rng = np.random.default_rng(0)
    truth = _true_saving(_population(400_000, rng))
    assert 0.10 < truth < 0.14 < MIN_SAVING
    estimates, plug_in = [], []
    for _ in range(60):
        successes = rng.binomial(G, _population(256, rng))
        estimates.append(_profile_saving(successes, G))
        plug_in.append(_true_saving(successes / G))
    assert np.mean(plug_in) > truth + 0.07  # the bias the fix removes: c/K as the pass rate
    assert abs(np.mean(estimates) - truth) < 0.01, (np.mean(estimates), truth)
    # the recommendation follows: plain GRPO in most profiles now, screening in most with c/K
    assert np.mean(np.asarray(estimates) < MIN_SAVING) > 0.75 > 0.25 > np.mean(np.asarray(plug_in) < MIN_SAVING)


def test_the_intervals_cover_the_truth():
    rng = np.random.default_rng(1)
    truth = _true_saving(_population(400_000, rng))
    covered = []
    for _ in range(60):
        successes = rng.binomial(G, _population(256, rng))
        low, high = recommend_mode(successes, G, G).intervals["saving"]
        covered.append(low <= truth <= high)
    assert np.mean(covered) >= 0.85, np.mean(covered)  # 95% intervals; 60 draws


@settings(max_examples=30, deadline=None)
@given(p=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), k=st.sampled_from([2, 4]), G_=st.sampled_from([8, 16]))
def test_costs_on_exact_moments_are_probe_rule_bound(p, k, G_):
    """The estimator's cost model, given the population's exact moments, is `probe_rule_bound` and G / r."""
    p = np.asarray(p)
    means = np.array([np.mean(p**k), np.mean((1 - p) ** k), np.mean(p**G_), np.mean((1 - p) ** G_)])
    grpo, screening = _costs(means, k, G_)
    retention = float(np.mean(mixed_chance(p, G_)))
    if retention < 1e-9:  # no mixed group: the cost is infinite or beyond any tolerance
        return
    assert grpo == pytest.approx(G_ / retention, rel=1e-9)
    assert screening == pytest.approx(probe_rule_bound(p, k, G_)[0], rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(samples=st.integers(8, 20), power=st.sampled_from([1, 4, 8]), p=st.floats(0.0, 1.0))
def test_power_estimates_are_unbiased(samples, power, p):
    """E[C(c, j) / C(K, j)] = p^j over c ~ Binomial(K, p), exactly."""
    chances = [math.comb(samples, c) * p**c * (1 - p) ** (samples - c) for c in range(samples + 1)]
    high, low = power_estimates(list(range(samples + 1)), [samples] * (samples + 1), power)
    assert float(np.dot(chances, high)) == pytest.approx(p**power, abs=1e-9)
    assert float(np.dot(chances, low)) == pytest.approx((1 - p) ** power, abs=1e-9)


def test_grpo_cost_matches_simulated_groups():
    """G / (share of mixed groups), against groups of G drawn from prompts known through many samples."""
    rates = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    choice = recommend_mode((rates * 1000).astype(int), 1000, G)
    draws = np.random.default_rng(0).random((20_000, len(rates), G)) < rates[None, :, None]
    mixed = (draws.any(axis=2) & ~draws.all(axis=2)).mean()
    assert choice.costs["grpo"] == pytest.approx(G / mixed, rel=0.03)


def test_screening_when_most_groups_are_zero_variance():
    choice = recommend_mode([8] * 40 + [0] * 30 + [4] * 30, samples=8, group_size=8, evidence=SETTING)
    assert choice.mode == "screening at GRPO budget"
    assert choice.config == {
        "dynamic_sampling": True,
        "dynamic_sampling_screen_generations": 4,
        "dynamic_sampling_fixed_budget": True,
    }
    assert set(choice.costs) == {"grpo", "screening k=4"}  # the measured modes only: no k = 2
    assert choice.zero_variance_share == pytest.approx(0.7)  # at 4 of 8, a group of all 8 is the sample itself
    low, high = choice.intervals["saving"]
    assert low <= choice.saving <= high and choice.saving >= MIN_SAVING
    assert f"{choice.saving:.0%}" in choice.reason and "docs/choosing.md" in choice.reason


def test_plain_grpo_when_screening_saves_little():
    choice = recommend_mode([4] * 10, samples=8, group_size=8, evidence=SETTING)
    assert choice.mode == "plain GRPO" and choice.config == {"dynamic_sampling": False}
    assert choice.saving < MIN_SAVING and f"{MIN_SAVING:.0%}" in choice.reason


def test_the_default_evidence_is_the_studys_no_measurable_difference_at_g_8():
    """The study set no threshold (docs/ablation.md): at G = 8 the answer is "no measurable difference expected" with
    dynamic sampling off, whatever the saving, and the fit's gain at the dataset's saving; other G are not covered."""
    assert EVIDENCE is STUDY and STUDY.threshold is None and STUDY.group_sizes == (8,)
    assert STUDY.config["dynamic_sampling_pipeline"] is True  # the mode the study measured: its arm 10
    low_covered, high_covered = STUDY.fit["covered"]
    for successes in ([0] * 10 + [4] * 90, [8] * 40 + [0] * 30 + [4] * 30, [4] * 10, [0] * 90 + [4] * 10):
        choice = recommend_mode(successes, samples=8, group_size=8)
        assert choice.config == {"dynamic_sampling": False} and "leave dynamic sampling off" in choice.reason
        mean, low, high = STUDY.gain_at(choice.saving)
        assert f"expects a gain of {100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] points" in choice.reason
        if low_covered <= choice.saving <= high_covered:  # the study's answer
            assert choice.mode == NO_DIFFERENCE and "within 2 points" in choice.reason
            assert "or keep pipelined screening at GRPO's budget (the recipes' mode)" in choice.reason
            assert "an extrapolation" not in choice.reason
        else:  # a saving the study did not measure: no answer claimed
            assert choice.mode == "plain GRPO" and "an extrapolation" in choice.reason
            assert "not determined for this saving" in choice.reason and NO_DIFFERENCE not in choice.reason
    savings = [recommend_mode(c, 8, 8).saving for c in ([0] * 10 + [4] * 90, [0] * 90 + [4] * 10)]
    assert low_covered <= savings[0] <= high_covered < savings[1]  # both branches ran
    wider = recommend_mode([0] * 30 + [8] * 10, samples=16, group_size=16)
    assert wider.mode == "plain GRPO" and "at G = 8" in wider.reason and "saving" not in wider.intervals


def test_no_unmeasured_probe_count_is_ever_recommended():
    """k = 4 was the one screening setting measured: a G it does not divide gets plain GRPO, never k = 2 or 3."""
    for group_size in (4, 6, 12):
        successes = [0] * 30 + [group_size // 2] * 10
        choice = recommend_mode(successes, samples=group_size, group_size=group_size, evidence=SETTING)
        modes = {k for k in choice.costs if k.startswith("screening")}
        if group_size % MEASURED_PROBES or group_size == MEASURED_PROBES:
            assert choice.mode == "plain GRPO" and not modes and "k = 4" in choice.reason
        else:
            assert modes == {"screening k=4"}
        assert choice.config.get("dynamic_sampling_screen_generations") in (None, MEASURED_PROBES)


def test_no_mode_helps_when_no_group_can_be_mixed():
    choice = recommend_mode([0, 8, 0], samples=8, group_size=8)
    assert choice.mode == "no mode can help" and "keep-band" in choice.reason
    assert all(math.isinf(cost) for cost in choice.costs.values())


def test_graded_rewards_get_plain_grpo_with_a_note():
    choice = recommend_mode([4, 0, 2], samples=4, group_size=4, binary=False)
    assert choice.mode == "plain GRPO" and "graded" in choice.reason and choice.costs == {}


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="group_size"):
        recommend_mode([1], 2, group_size=1)
    with pytest.raises(ValueError, match="no prompts"):
        recommend_mode([], 8, group_size=8)
    with pytest.raises(ValueError, match="successes <= samples"):
        recommend_mode([9], 8, group_size=8)
    with pytest.raises(ValueError, match="at least G = 8"):
        recommend_mode([1], 4, group_size=8)


def test_the_profile_summary_carries_the_recommendation():
    rows = [[1] * 8, [0] * 8] * 3 + [[1, 0] * 4]  # 6 prompts always right or wrong, 1 at pass rate 1/2
    stats = [prompt_stats(i, r, [3] * 8, [False] * 8, group_size=8) for i, r in enumerate(rows)]
    summary = summarize(stats, group_size=8)
    recommendation = summary["recommendation"]
    costs = recommendation["completions_per_informative_group"]
    assert set(costs) == {"grpo", "screening k=4"}
    # one number per quantity: GRPO's cost is G over the summary's own retention
    assert costs["grpo"] == pytest.approx(8 / summary["expected_retention"], rel=1e-3)
    assert set(recommendation["intervals_95"]) == {"zero_variance_share", "grpo", "screening k=4", "saving"}
    assert recommendation["threshold"] == STUDY.note and "20 seeds" in STUDY.note
