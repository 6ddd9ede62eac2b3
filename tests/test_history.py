"""Prompt-history skipping: the skip rule, admission from the refill stream, the exploration floor, rank
consistency, checkpoints, and the per-group outcomes the trainer records."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.core.groups import (
    GroupOutcome,
    group_outcomes,
    group_upper_counts,
    informative_groups,
    zero_variance_split,
)
from trl_dapo_ext.dynamic_sampling.history import PromptHistory, predicted_retention, seeded_uniform
from trl_dapo_ext.dynamic_sampling.stream import RefillSampler

INF, HIGH, LOW, OTHER = GroupOutcome.INFORMATIVE, GroupOutcome.ALL_MAX, GroupOutcome.ALL_MIN, GroupOutcome.OTHER


def stream(indices):
    iterator = iter(indices)
    return lambda count: [next(iterator) for _ in range(count)]


# --- the skip rule --------------------------------------------------------------------------------------------------


def test_a_prompt_is_skippable_only_after_window_zero_variance_visits():
    history = PromptHistory(window=2)
    history.record([7], [HIGH])
    assert not history.skippable(7)  # one visit is not enough with window 2
    history.record([7], [LOW])
    assert history.skippable(7)  # all right, then all wrong: both zero-variance
    history.record([7], [INF])
    assert not history.skippable(7)  # the latest visit was informative
    assert not history.skippable(8)  # never seen


def test_only_the_chosen_kinds_make_a_prompt_skippable():
    history = PromptHistory(window=1, skip_outcomes=(GroupOutcome.ALL_MAX,))
    history.record([1, 2, 3], [HIGH, LOW, OTHER])
    assert [history.skippable(i) for i in (1, 2, 3)] == [True, False, False]
    with pytest.raises(ValueError):
        PromptHistory(skip_outcomes=(GroupOutcome.INFORMATIVE,))


# --- admission ------------------------------------------------------------------------------------------------------


def test_admit_draws_replacements_and_counts_what_it_skipped():
    history = PromptHistory(window=1, floor=0.0)
    history.record([0, 1, 2], [LOW, HIGH, INF])
    admission = history.admit(stream(range(10)), count=4, step=3, round_index=1)
    assert admission.admitted == [2, 3, 4, 5]
    assert (admission.proposed, admission.skipped, admission.readmitted, admission.forced) == (6, 2, 0, 0)
    assert (history.proposed, history.skipped) == (6, 2)


def test_floor_one_never_skips():
    history = PromptHistory(window=1, floor=1.0)
    history.record(list(range(5)), [LOW] * 5)
    admission = history.admit(stream(range(5)), count=5, step=0, round_index=1)
    assert admission.admitted == list(range(5)) and admission.readmitted == 5 and admission.skipped == 0


def test_a_stream_of_only_skippable_prompts_still_fills_the_request():
    history = PromptHistory(window=1, floor=0.0)
    history.record(list(range(100)), [HIGH] * 100)
    admission = history.admit(stream(range(100)), count=3, step=0, round_index=1, max_proposals=10)
    assert len(admission.admitted) == 3 and admission.forced == 3
    assert admission.proposed == 10  # never drew past the limit


@settings(max_examples=50, deadline=None)
@given(
    outcomes=st.lists(st.sampled_from(list(GroupOutcome)), min_size=30, max_size=30),
    count=st.integers(0, 12),
    floor=st.floats(0.0, 1.0),
    step=st.integers(0, 10**6),
)
def test_admission_accounting(outcomes, count, floor, step):
    history = PromptHistory(window=1, floor=floor, seed=5)
    history.record(list(range(30)), outcomes)
    sampler = RefillSampler(30, seed=1)
    admission = history.admit(sampler.take, count, step=step, round_index=2)
    assert len(admission.admitted) == count
    assert admission.proposed == count + admission.skipped == sampler.taken
    skippable = [i for i in admission.admitted if history.skippable(i)]
    assert len(skippable) == admission.readmitted + admission.forced


def test_skip_rate_is_one_minus_the_floor():
    history = PromptHistory(window=1, floor=0.25, seed=3)
    history.record(list(range(1000)), [LOW] * 1000)
    admission = history.admit(RefillSampler(1000, seed=0).take, count=500, step=1, round_index=1)
    share = admission.readmitted / (admission.readmitted + admission.skipped)
    assert 0.21 <= share <= 0.29


def test_the_exploration_floor_keeps_every_prompt_visited():
    """Half the prompts are informative, half all wrong forever: the all-wrong ones must still be generated again."""
    size = 40

    def outcome(index: int) -> GroupOutcome:
        return INF if index < size // 2 else LOW

    def run(floor: float) -> set[int]:
        history = PromptHistory(window=1, floor=floor, seed=0)
        history.record(list(range(size)), [outcome(i) for i in range(size)])  # the all-wrong half: skippable
        sampler, seen = RefillSampler(size, seed=0), set()
        for step in range(300):
            admitted = history.admit(sampler.take, 4, step=step, round_index=1).admitted
            history.record(admitted, [outcome(i) for i in admitted])
            seen.update(admitted)
        return seen

    assert run(floor=0.2) == set(range(size))
    assert run(floor=0.0) == set(range(size // 2))  # without a floor the all-wrong half is never seen again


def test_same_seed_same_decisions_on_every_process():
    """Two processes with the same seed and the same (gathered) history skip exactly the same prompts."""
    ranks = [PromptHistory(window=2, floor=0.3, seed=11) for _ in range(2)]
    samplers = [RefillSampler(64, seed=4) for _ in range(2)]
    for step in range(20):
        admissions = [h.admit(s.take, 8, step=step, round_index=1) for h, s in zip(ranks, samplers)]
        assert admissions[0] == admissions[1]
        outcomes = [GroupOutcome((i * 7 + step) % 4) for i in admissions[0].admitted]
        for history in ranks:
            history.record(admissions[0].admitted, outcomes)
    assert ranks[0].state_dict() == ranks[1].state_dict()
    assert ranks[0].skipped > 0


def test_coins_depend_on_the_seed_and_the_key():
    draws = [seeded_uniform(seed, 3, 1, position, 9) for seed in (0, 1) for position in range(50)]
    assert len(set(draws)) == 100 and all(0.0 <= u < 1.0 for u in draws)


# --- checkpoints ----------------------------------------------------------------------------------------------------


def test_state_round_trip_gives_identical_decisions():
    original = PromptHistory(window=2, floor=0.2, seed=9)
    original.record(list(range(20)), [HIGH, LOW, OTHER, INF] * 5)
    original.record(list(range(20)), [LOW, LOW, INF, HIGH] * 5)
    original.admit(stream(range(20)), count=5, step=0, round_index=1)
    restored = PromptHistory(window=2, floor=0.2, seed=9)
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    assert restored.state_dict() == original.state_dict()
    proposals = list(range(20)) * 3
    assert restored.admit(stream(proposals), 10, step=1, round_index=2) == original.admit(
        stream(proposals), 10, step=1, round_index=2
    )


def test_tallies_survive_a_round_trip_and_old_checkpoints_load_without_them():
    original = PromptHistory(seed=3, generations=8)
    original.record([1, 2, 1], [INF, HIGH, LOW], upper=[3, 8, 0], scorable=[8, 8, 7])
    restored = PromptHistory(seed=3, generations=8)
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    assert restored.tallies == original.tallies
    assert [restored.stratum(i) for i in (1, 2, 3)] == [original.stratum(i) for i in (1, 2, 3)]
    old = original.state_dict()
    del old["tallies"]  # written before the tallies existed
    legacy = PromptHistory(seed=3, generations=8)
    legacy.load_state_dict(old)
    assert legacy.tallies == {} and legacy.stratum(1) == "all_min"  # back to the last outcome


def test_restore_checks_the_seed_and_trims_to_a_shorter_window():
    saved = PromptHistory(window=3, seed=1)
    saved.record([5, 5, 5], [INF, HIGH, HIGH])
    with pytest.raises(ValueError, match="seed"):
        PromptHistory(window=3, seed=2).load_state_dict(saved.state_dict())
    shorter = PromptHistory(window=2, seed=1)
    shorter.load_state_dict(saved.state_dict())
    assert shorter.skippable(5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"floor": -0.1},
        {"floor": 1.5},
        {"max_proposals_factor": 0},
        {"generations": 1},
        {"tally_decay": 1.5},
    ],
)
def test_rejects_invalid_settings(kwargs):
    with pytest.raises(ValueError):
        PromptHistory(**kwargs)


def test_record_needs_one_outcome_per_index():
    with pytest.raises(ValueError):
        PromptHistory().record([1, 2], [INF])


@pytest.mark.parametrize(
    "upper, scorable",
    [([1], [4, 4]), ([1, 2], None), ([5, 1], [4, 4])],
    ids=["short", "no-scorable", "upper>scorable"],
)
def test_record_checks_the_tallies(upper, scorable):
    with pytest.raises(ValueError):
        PromptHistory(generations=4).record([1, 2], [INF, INF], upper=upper, scorable=scorable)


# --- per-prompt tallies and predicted retention ---------------------------------------------------------------------


def _all_one_side_by_lgamma(a: float, b: float, generations: int) -> float:
    """P(all G in the upper half) = B(a + G, b) / B(a, b), through log-gamma: another route than the product."""
    log_beta = lambda x, y: math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)  # noqa: E731
    return math.exp(log_beta(a + generations, b) - log_beta(a, b))


@settings(max_examples=80, deadline=None)
@given(st.floats(0, 40), st.floats(0, 40), st.integers(2, 16))
def test_predicted_retention_is_one_minus_the_beta_binomial_edges(upper, lower, generations):
    a, b = 0.5 + upper, 0.5 + lower
    expected = 1 - _all_one_side_by_lgamma(a, b, generations) - _all_one_side_by_lgamma(b, a, generations)
    assert predicted_retention(upper, lower, generations) == pytest.approx(expected, abs=1e-9)
    assert predicted_retention(upper, lower, generations) == pytest.approx(
        predicted_retention(lower, upper, generations)
    )  # symmetric: all right and all wrong are equally uninformative


@pytest.mark.parametrize("upper, lower, generations", [(0, 0, 8), (3, 5, 8), (14, 2, 4), (0, 16, 8)])
def test_predicted_retention_matches_simulated_groups(upper, lower, generations):
    """Draw a share from the posterior, then a group from the share: the informative frequency agrees."""
    rng = np.random.default_rng(0)
    shares = rng.beta(0.5 + upper, 0.5 + lower, size=200_000)
    successes = rng.binomial(generations, shares)
    frequency = np.mean((successes > 0) & (successes < generations))
    expected = predicted_retention(upper, lower, generations)
    assert abs(frequency - expected) < 4 * math.sqrt(expected * (1 - expected) / len(shares)) + 1e-9


def test_tallies_fade_by_visit_and_set_the_stratum():
    history = PromptHistory(generations=8, tally_decay=0.5)
    history.record([7], [HIGH], upper=[8], scorable=[8])
    history.record([7], [INF], upper=[4], scorable=[6])
    assert history.tallies[7] == (0.5 * 8 + 4, 0.5 * 0 + 2)
    prediction = history.predicted_retention(7)
    assert prediction == pytest.approx(predicted_retention(8.0, 2.0, 8))
    bucket = int(prediction * 10)
    assert history.stratum(7) == f"predicted {bucket / 10:.1f}-{(bucket + 1) / 10:.1f}"
    history.record([9], [OTHER], upper=[-1], scorable=[8])  # unknown upper count: outcome only
    assert 9 not in history.tallies and history.stratum(9) == "other"
    assert PromptHistory().predicted_retention(7) is None  # no generations: no prediction


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0, float("nan")]), min_size=12, max_size=12))
def test_group_upper_counts_brute_force(values):
    upper, scorable = group_upper_counts(torch.tensor(values), 4, lowest=0.0, highest=1.0)
    groups = [values[i : i + 4] for i in range(0, 12, 4)]
    assert scorable == [sum(not math.isnan(v) for v in group) for group in groups]
    assert upper == [sum(v > 0.5 for v in group if not math.isnan(v)) for group in groups]
    assert group_upper_counts(torch.tensor(values), 4, lowest=1.0, highest=1.0)[0] == [-1, -1, -1]


# --- outcomes from rewards ------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 0.5, float("nan")]), min_size=12, max_size=12))
def test_group_outcomes_agree_with_the_zero_variance_split(values):
    rewards = torch.tensor(values)
    informative = informative_groups(rewards, 3)
    outcomes = group_outcomes(rewards, 3, informative, lowest=0.0, highest=1.0)
    split = zero_variance_split(rewards, 3, informative, lowest=0.0, highest=1.0)
    assert [o == INF for o in outcomes] == informative.tolist()
    assert (outcomes.count(HIGH), outcomes.count(LOW), outcomes.count(OTHER)) == (
        split.all_max,
        split.all_min,
        split.other,
    )


# --- strata and previews (the planner reads both) ------------------------------------------------------------------


def test_stratum_is_the_last_outcome_without_tallies():
    history = PromptHistory(window=2)
    history.record([1, 2], [INF, HIGH])
    history.record([1], [LOW])
    assert [history.stratum(i) for i in (1, 2, 3)] == ["all_min", "all_max", "unseen"]
    history.record([3], [OTHER])
    assert history.stratum(3) == "other"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([INF, HIGH, LOW]), min_size=20, max_size=20), st.integers(1, 8))
def test_a_dry_run_admission_previews_the_real_one_without_counting(outcomes, count):
    history = PromptHistory(window=1, floor=0.3, seed=5)
    history.record(range(20), outcomes)
    preview_stream, real_stream = RefillSampler(20, seed=2), RefillSampler(20, seed=2)
    preview = history.admit(preview_stream.take, count, step=4, round_index=2, commit=False)
    assert (history.proposed, history.skipped) == (0, 0)
    real = history.admit(real_stream.take, count, step=4, round_index=2)
    assert preview == real
    assert history.proposed == real.proposed


def test_peek_does_not_advance_the_refill_stream():
    sampler = RefillSampler(dataset_size=5, seed=0)
    sampler.take(3)
    state = sampler.state_dict()
    assert sampler.peek(7) == sampler.peek(7)  # across a pass boundary too
    assert sampler.state_dict() == state
    assert sampler.peek(7) == sampler.take(7)
