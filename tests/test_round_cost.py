"""The cost-aware refill planner: the round cost fit, the Bellman values against brute force, and its limits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.dynamic_sampling.retention import beta_binomial_head, beta_binomial_pmf
from trl_dapo_ext.dynamic_sampling.round_cost import Costs, RoundCostModel, expected_next_values, plan_values, survival

# --- the cost fit ---------------------------------------------------------------------------------------------------


def test_cost_fit_recovers_known_parameters_from_noisy_timings_with_outliers():
    fixed, per_completion = 3.0, 0.02  # a latency of 150 completion-equivalents
    rng = np.random.default_rng(0)
    model = RoundCostModel(prior_latency=16.0, prior_pairs=0.0)
    for i in range(64):
        completions = int(rng.integers(16, 512))
        seconds = (fixed + per_completion * completions) * rng.normal(1.0, 0.05)
        if i % 16 == 5:  # a garbage collection, a compile: four rounds five times too slow
            seconds *= 5
        model.observe(completions, seconds)
    assert model.latency() == pytest.approx(fixed / per_completion, rel=0.15)
    assert model.seconds_per_completion() == pytest.approx(per_completion, rel=0.05)


def test_cost_fit_keeps_the_prior_until_rounds_of_different_sizes_are_seen():
    model = RoundCostModel(prior_latency=16.0)
    assert model.latency() == 16.0 and math.isnan(model.seconds_per_completion())
    for _ in range(10):
        model.observe(256, 4.0)  # one size cannot tell the fixed part from the per-completion part
    assert model.latency() == 16.0
    assert model.seconds_per_completion() == pytest.approx(4.0 / (256 + 16))
    model.observe(128, 3.0)
    model.observe(64, 2.5)  # enough pairs of different sizes: the fit takes over, shrunk towards the prior
    assert model.latency() != 16.0


def test_cost_fit_state_round_trip():
    model = RoundCostModel()
    for n, t in ((10, 1.0), (20, 1.5), (40, 2.4), (80, 4.1)):
        model.observe(n, t)
    restored = RoundCostModel()
    restored.load_state_dict(model.state_dict())
    assert restored.latency() == model.latency() and restored.state_dict() == model.state_dict()


def test_cost_fit_rejects_a_negative_prior_and_ignores_unusable_rounds():
    with pytest.raises(ValueError, match="prior_latency"):
        RoundCostModel(prior_latency=-1.0)
    model = RoundCostModel()
    model.observe(0, 1.0)
    model.observe(10, math.nan)
    model.observe(10, -1.0)
    assert len(model.rounds) == 0


# --- the Bellman values against brute force -------------------------------------------------------------------------


def brute_force_value(m: int, k: int, costs: Costs, sizes, pmfs, processes: int) -> float:
    """Least expected cost by exhaustive recursion over every joint outcome of every process."""
    if m == 0:
        return 0.0
    if k == 0:
        return costs.group_value * m + costs.exhaustion_penalty
    best = brute_force_value(m, k - 1, costs, sizes, pmfs, processes)  # may leave a round unused
    for n, pmf in zip(sizes, pmfs):
        expected = 0.0
        for outcome in itertools.product(range(len(pmf)), repeat=processes):
            chance = math.prod(pmf[y] for y in outcome)
            left = max(max(m - y, 0) for y in outcome)
            expected += chance * brute_force_value(left, k - 1, costs, sizes, pmfs, processes)
        best = min(best, costs.latency + costs.generations * n + expected)
    return best


@settings(max_examples=25, deadline=None)
@given(
    latency=st.floats(0.0, 50.0),
    rate=st.floats(0.05, 0.95),
    rounds=st.integers(1, 3),
    processes=st.integers(1, 2),
    penalty=st.sampled_from([0.0, 200.0]),
)
def test_plan_values_equal_an_exhaustive_recursion(latency, rate, rounds, processes, penalty):
    limit, sizes = 3, [1, 2, 4]
    pmfs = [np.array(beta_binomial_pmf(n, rate * 20, (1 - rate) * 20)) for n in sizes]
    costs = Costs(latency=latency, generations=4, group_value=30.0, exhaustion_penalty=penalty)
    survivals = np.array([survival(pmf, limit) for pmf in pmfs])
    values = plan_values(costs, survivals, sizes, rounds, processes)
    for m in range(limit + 1):
        expected = brute_force_value(m, rounds, costs, sizes, pmfs, processes)
        assert values[rounds, m] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_expected_next_values_one_process_shortcut_matches_the_general_formula():
    rng = np.random.default_rng(1)
    pmfs = rng.random((6, 9))
    pmfs /= pmfs.sum(axis=1, keepdims=True)
    survivals = np.array([survival(pmf, 8) for pmf in pmfs])
    values = rng.random(9) * 10
    fast = expected_next_values(values, survivals, processes=1)
    slow = np.array(
        [[sum(p[y] * values[max(m - y, 0)] for y in range(len(p))) for m in range(9)] for p in pmfs]
    )  # m' = max(m - Y, 0), enumerated
    assert np.allclose(fast, slow)


@settings(max_examples=30, deadline=None)
@given(trials=st.integers(0, 60), alpha=st.floats(0.05, 50), beta=st.floats(0.05, 50), limit=st.integers(0, 20))
def test_truncated_beta_binomial_matches_the_full_law(trials, alpha, beta, limit):
    full = np.array(beta_binomial_pmf(trials, alpha, beta))
    head = beta_binomial_head([trials], alpha, beta, limit)[0]
    expected = np.zeros(limit + 1)
    expected[: min(limit, trials + 1)] = full[:limit]
    expected[limit] = full[limit:].sum()
    assert np.allclose(head, expected, atol=1e-9)


# --- the planner's choices ------------------------------------------------------------------------------------------


def learned(latency: float, retention: float = 0.5, **kwargs) -> RefillPlanner:
    """A cost-aware planner that has seen 20 steps at a stable retention."""
    planner = RefillPlanner(max_oversample=4.0, round_latency=latency, **kwargs)
    for _ in range(20):
        refill = planner.first_round(32)
        planner.observe(32 + refill, round((32 + refill) * retention))
        planner.end_step()
    return planner


def expected_surplus(planner: RefillPlanner, groups: int, missing: int) -> float:
    alpha, beta = planner._pooled_alpha_beta()
    pmf = np.array(beta_binomial_pmf(groups, alpha, beta))
    return float(np.dot(pmf, np.clip(np.arange(groups + 1) - missing, 0, None)))


def test_with_zero_latency_rounds_leave_almost_no_surplus_like_one_by_one_replacement():
    planner = learned(latency=0.0)
    refill = planner.first_round(32, rounds_left=10)
    assert expected_surplus(planner, 32 + refill, 32) < 0.5  # one-by-one leaves none; a huge round leaves 32+
    planner.observe(32 + refill, (32 + refill) // 2)
    assert expected_surplus(planner, planner.next_round(6, rounds_left=9), 6) < 0.5


def test_with_a_huge_latency_the_planner_sends_one_large_round():
    planner = learned(latency=1e6)
    refill = planner.first_round(32, rounds_left=10)
    assert planner.step_fill_chance > 0.99
    assert refill > learned(latency=16.0).first_round(32, rounds_left=10)


def test_round_size_grows_with_the_latency():
    sizes = [learned(latency).first_round(32, rounds_left=10) for latency in (0.0, 4.0, 16.0, 64.0, 256.0)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


@pytest.mark.parametrize("informative_per_step", [0, 1])
def test_low_retention_asks_for_the_largest_rounds_and_zero_stops_without_dividing_by_zero(informative_per_step):
    planner = RefillPlanner(max_oversample=3.0)
    for _ in range(5):
        planner.first_round(8)
        planner.observe(24, informative_per_step)
        planner.end_step()
    refill = planner.first_round(8)
    assert math.isfinite(planner.step_expected_cost) and planner.step_fill_chance < 1e-3
    planner.observe(8 + refill, 0)
    if informative_per_step:  # 1 in 24: nine rounds of the largest size may still fill the batch
        assert refill == 16 and planner.next_round(8, rounds_left=9) == 24
    else:  # none in 120: no round can fill it, so stop (exhausted) instead of paying for nine more
        assert refill == 0 and planner.next_round(8, rounds_left=9) == 0
    assert math.isfinite(planner._plan[0])


def test_a_certainly_zero_retention_spends_nothing_beyond_the_batch():
    planner = RefillPlanner(max_oversample=3.0, prior_strength=1e-9)
    for _ in range(5):
        planner.first_round(8)
        planner.observe(24, 0)
        planner.end_step()
    assert planner.first_round(8) == 0
    assert math.isfinite(planner.step_expected_cost)


@settings(max_examples=60, deadline=None)
@given(
    target=st.integers(1, 24),
    max_oversample=st.floats(1.0, 4.0),
    budget=st.one_of(st.none(), st.integers(24, 80)),
    latency=st.sampled_from([0.0, 4.0, 64.0, 1e4]),
    retentions=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
    processes=st.integers(1, 3),
)
def test_never_exceeds_the_round_cap_or_the_step_budget(
    target, max_oversample, budget, latency, retentions, processes
):
    if budget is not None:
        budget = max(budget, target)
    planner = RefillPlanner(
        max_oversample=max_oversample, max_groups_per_step=budget, round_latency=latency, num_processes=processes
    )
    cap = math.ceil(target * max_oversample)
    for retention in retentions:
        planned = target + planner.first_round(target)
        assert planned <= cap and (budget is None or planned <= budget)
        missing = target
        for rounds_left in range(9, 0, -1):
            missing -= round(retention * planned)
            if missing <= 0:
                break
            planner.observe(planned * processes, round(retention * planned) * processes)
            refill = planner.next_round(missing, rounds_left=rounds_left)
            if refill == 0:  # the budget is spent, or no round can fill the batch any more (retention too low)
                assert (budget is not None and planner.step_planned >= budget) or planner._plan[1] == 0.0
                break
            assert 1 <= refill <= max(cap, 1)
            planned = refill
            assert budget is None or planner.step_planned <= budget
        planner.end_step()


def test_measured_latency_steers_the_plan():
    fixed = learned(latency=16.0)
    measured = learned(latency=16.0, measure_latency=True)
    for completions in (64, 128, 256, 512, 96, 384):
        measured.cost_model.observe(completions, 10.0 + 0.01 * completions)  # 1000 completion-equivalents
    assert measured.latency() > 500
    assert measured.first_round(32, rounds_left=10) > fixed.first_round(32, rounds_left=10)


def test_the_step_records_expected_and_realised_cost():
    planner = learned(latency=16.0)
    refill = planner.first_round(32, rounds_left=10)
    planner.observe(32 + refill, 10)
    extra = planner.next_round(22, rounds_left=9)
    planner.end_step()
    step = planner.last_step
    assert step["realised_cost"] == 2 * 16.0 + 8 * (32 + refill + extra)
    assert step["expected_cost"] >= 16.0 + 8 * (32 + refill) and 0.0 < step["fill_chance"] < 1.0


def test_the_state_round_trip_keeps_the_cost_model():
    planner = learned(latency=16.0, measure_latency=True)
    for n, t in ((10, 1.0), (20, 1.5), (40, 2.4), (80, 4.1)):
        planner.cost_model.observe(n, t)
    restored = RefillPlanner(max_oversample=4.0, round_latency=16.0, measure_latency=True)
    restored.load_state_dict(planner.state_dict())
    assert restored.latency() == planner.latency()
    assert restored.first_round(32) == planner.first_round(32)
