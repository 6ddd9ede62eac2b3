"""The planner's fast search for large shortfalls: FFT expectations, the bounded refinement, and
decisions against the direct search (kept as ``RefillPlanner.exact_up_to``)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.dynamic_sampling.retention import (
    BAND_TAIL,
    beta_binomial_band,
    beta_binomial_head,
    beta_binomial_rows,
)
from trl_dapo_ext.dynamic_sampling.round_cost import (
    Costs,
    expected_next_values,
    fft_convolve,
    least_cost_between,
    next_values_operator,
    plan_values,
)
from trl_dapo_ext.dynamic_sampling.scoring import PLAN_TOLERANCE, many_short_scorer, one_short_scorer, own_distribution


def test_fft_convolution_by_hand():
    assert fft_convolve(np.array([0.5, 0.5]), np.array([1.0, 2.0, 3.0])) == pytest.approx([0.5, 1.5, 2.5, 1.5])
    assert fft_convolve(np.ones(1), np.array([0.25, 0.75])) == pytest.approx([0.25, 0.75])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=300), st.lists(st.floats(0, 1e4), min_size=1, max_size=300))
def test_fft_convolution_equals_the_direct_one(a, b):
    assert fft_convolve(np.array(a), np.array(b)) == pytest.approx(np.convolve(a, b), abs=1e-9 * (1 + max(b)) * len(a))


def test_next_values_operator_by_hand():
    # one group, informative with chance 1/2: from a shortfall of 1 half the time nothing is left, half the time 1
    survivals = np.array([[1.0, 0.5]])
    assert next_values_operator(survivals, 1)(np.array([0.0, 10.0])) == pytest.approx(np.array([[0.0, 5.0]]))
    # two processes: both must bring their group, 1/4; so 3/4 of the time one is still short
    assert next_values_operator(survivals, 2)(np.array([0.0, 10.0])) == pytest.approx(np.array([[0.0, 7.5]]))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 60),
    st.lists(st.integers(1, 200), min_size=1, max_size=6),
    st.floats(0.2, 20),
    st.floats(0.2, 20),
    st.integers(1, 4),
    st.integers(0, 2**31),
)
def test_next_values_operator_equals_the_direct_expectation(limit, sizes, alpha, beta, processes, seed):
    head = beta_binomial_head(sizes, alpha, beta, limit)
    survivals = np.cumsum(head[:, ::-1], axis=1)[:, ::-1]
    values = np.sort(np.random.default_rng(seed).uniform(0, 1e5, limit + 1))
    values[0] = 0.0
    direct = expected_next_values(values, survivals, processes)
    assert next_values_operator(survivals, processes)(values) == pytest.approx(direct, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("processes", [1, 3])
def test_plan_values_by_fft_equal_the_direct_recursion(processes):
    costs = Costs(latency=16.0, generations=8, group_value=20.0, exhaustion_penalty=1e6)
    sizes = [1, 2, 5, 17, 60, 200]
    head = beta_binomial_head(sizes, 3.0, 4.0, 150)
    survivals = np.cumsum(head[:, ::-1], axis=1)[:, ::-1]
    direct = plan_values(costs, survivals, sizes, rounds=6, processes=processes)
    fast = plan_values(costs, survivals, sizes, rounds=6, processes=processes, method="fft")
    assert fast == pytest.approx(direct, rel=1e-10, abs=1e-6)


def test_plan_values_rejects_an_unknown_method():
    with pytest.raises(ValueError, match="method"):
        plan_values(Costs(1.0, 1, 1.0, 0.0), np.ones((1, 2)), [1], rounds=1, processes=1, method="magic")


def test_least_cost_between_by_hand():
    scores = {0: 10.0, 100: 100.0}
    least_cost_between(lambda ns: [n + max(10 - n, 0) for n in ns], 0, 100, 1.0, scores, tolerance=0.0)
    assert min(scores.values()) == 10.0 and len(scores) < 20


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 400), st.floats(0.1, 10), st.integers(0, 2**31), st.sampled_from([0.0, 1e-3, 1e-2]))
def test_least_cost_between_is_within_its_tolerance_of_brute_force(width, slope, seed, share):
    drops = np.random.default_rng(seed).exponential(slope, width + 1)  # f non-increasing, of any shape
    f = 1e4 - np.concatenate(([0.0], np.cumsum(drops[1:])))
    cost = slope * np.arange(width + 1) + f
    scores = {0: float(cost[0]), width: float(cost[width])}
    tolerance = share * float(cost.min())
    least_cost_between(lambda ns: [float(cost[n]) for n in ns], 0, width, slope, scores, tolerance)
    assert all(scores[n] == cost[n] for n in scores)
    assert min(scores.values()) <= cost.min() + tolerance + 1e-9


def random_planner(rng: random.Random, exact_up_to: int) -> tuple[RefillPlanner, int, list[list[str]]]:
    """A planner after a few random steps, with strata, processes and a latency drawn at random."""
    processes = rng.choice([1, 1, 2, 3])
    planner = RefillPlanner(
        num_processes=processes,
        round_latency=rng.choice([0.0, 4.0, 16.0, 64.0, 256.0]),
        max_oversample=rng.choice([1.5, 3.0, 4.0]),
        max_groups_per_step=rng.choice([None, None, 600]),
    )
    planner.exact_up_to = exact_up_to
    target = rng.randint(1, 128)
    strata = ["a", "b", "c"]
    for _ in range(rng.randint(0, 5)):
        planner.step_target = target
        for stratum in strata:
            attempted = rng.randint(0, 3 * target)
            planner.observe(attempted, rng.randint(0, attempted), stratum=stratum)
        planner.end_step()
    own = [[rng.choice(strata) for _ in range(target)] for _ in range(processes)]
    return planner, target, own


def decisions(seed: int, exact_up_to: int) -> tuple[list[int], list[float]]:
    rng = random.Random(seed)
    planner, target, own = random_planner(rng, exact_up_to)
    stream = [rng.choice(["a", "b", "c"]) for _ in range(10_000)]
    plans = [planner.first_round(target, rounds_left=10, own=own, candidates=lambda n: stream[:n])]
    costs = [planner.step_expected_cost]
    planner.observe(target + plans[0], rng.randint(0, target + plans[0]), stratum="a")
    missing = [rng.randint(0, target) for _ in range(planner.num_processes)]
    plans.append(planner.next_round(missing, rounds_left=rng.randint(1, 9), candidates=lambda n: stream[:n]))
    costs.append(planner._plan[0])
    return plans, costs


@pytest.mark.parametrize("seed", range(60))
def test_up_to_128_groups_the_decisions_are_the_direct_search(seed):
    assert decisions(seed, exact_up_to=128) == decisions(seed, exact_up_to=10**9)


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_search_costs_at_most_its_tolerance_more_than_the_direct_one(seed):
    """Forced onto small shortfalls (where the direct search is cheap), the fast search's plan is as cheap as the
    direct one's up to PLAN_TOLERANCE, and never cheaper by more than rounding (it scores a subset of the same
    candidates)."""
    _, direct = decisions(seed, exact_up_to=10**9)
    _, fast = decisions(seed, exact_up_to=0)
    for exact, approximate in zip(direct, fast):
        assert approximate <= exact * (1 + PLAN_TOLERANCE) + 1e-6
        assert approximate >= exact * (1 - 1e-9) - 1e-6


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    st.floats(0.2, 2e4),
    st.floats(0.2, 2e4),
    st.integers(0, 400),
)
def test_beta_binomial_rows_from_tables_equal_the_direct_head(trials, alpha, beta, limit):
    direct = beta_binomial_head(trials, alpha, beta, limit)
    assert beta_binomial_rows(trials, alpha, beta, limit) == pytest.approx(direct, abs=1e-10)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 8000), min_size=1, max_size=8),
    st.floats(1.0, 3e4),
    st.floats(1.0, 3e4),
    st.integers(1, 3000),
)
def test_a_certified_band_leaves_out_at_most_its_tail(trials, alpha, beta, limit):
    band = beta_binomial_band(trials, alpha, beta, limit)
    rows = beta_binomial_rows(trials, alpha, beta, limit)[:, :limit]
    if band is None:
        return
    starts, inside = band
    width = inside.shape[1]
    for row, start, kept in zip(rows, starts, inside):
        assert kept == pytest.approx(row[start : start + width], rel=1e-12, abs=1e-300)
        assert row[:start].sum() + row[start + width :].sum() <= BAND_TAIL


def test_bands_where_the_law_is_sharp_and_none_where_no_bound_holds():
    assert beta_binomial_band([4000, 4100], 5000.0, 5000.0, limit=3000) is not None
    assert beta_binomial_band([4000], 0.5, 5000.0, limit=3000) is None  # alpha < 1: not log-concave
    assert beta_binomial_band([4000], 2.0, 2.0, limit=3000) is None  # a vague rate: the band is the whole row


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(0, 600),
    st.floats(1.0, 5e3),
    st.floats(1.0, 5e3),
    st.lists(st.integers(0, 1500), min_size=1, max_size=6),
    st.integers(0, 2**31),
)
def test_one_short_scorer_equals_the_general_one(need, own, alpha, beta, refills, seed):
    distribution = own_distribution(need, (("a", own),), {"a": (alpha, beta)}, need)
    values = np.sort(np.random.default_rng(seed).uniform(0, 1e5, need + 1))
    values[0] = 0.0
    one = one_short_scorer(distribution, need, (beta, alpha), values)(refills)
    many = many_short_scorer([(need, distribution, 1)], need, (beta, alpha), values)(refills)
    assert one[0] == pytest.approx(many[0], rel=1e-9, abs=1e-6)
    assert one[1] == pytest.approx(many[1], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("latency", [0.0, 16.0, 256.0])
@pytest.mark.parametrize("processes", [1, 2])
def test_above_128_groups_the_plans_cost_at_most_the_tolerance_more(latency, processes):
    """At 300 groups (the fast search's own range), against the direct search forced there."""
    costs = []
    for exact_up_to in (10**9, 128):
        planner = RefillPlanner(round_latency=latency, num_processes=processes)
        planner.exact_up_to = exact_up_to
        for _ in range(4):
            planner.step_target = 300
            planner.observe(attempted=1200, informative=450)
            planner.end_step()
        planner.first_round(300, rounds_left=10)
        first = planner.step_expected_cost
        planner.observe(attempted=700, informative=260)  # the same round 1 for both: plans of one state compare
        planner.next_round([40, 25][:processes], rounds_left=9)
        costs.append((first, planner._plan[0]))
    for exact, fast in zip(*costs):
        assert exact * (1 - 1e-9) - 1e-6 <= fast <= exact * (1 + PLAN_TOLERANCE) + 1e-6


def test_one_short_scorer_over_certified_bands_equals_the_general_one():
    need, refills, refill = 1500, [500, 1000, 2000, 3000], (3000.0, 3000.0)
    assert beta_binomial_band(refills, *refill, need) is not None  # the band path, not the whole rows
    distribution = own_distribution(need, (("a", 1000),), {"a": (2000.0, 4000.0)}, need)
    values = np.sort(np.random.default_rng(0).uniform(0, 1e5, need + 1))
    values[0] = 0.0
    one = one_short_scorer(distribution, need, refill, values)(refills)
    many = many_short_scorer([(need, distribution, 1)], need, refill, values)(refills)
    assert one[0] == pytest.approx(many[0], rel=1e-9, abs=1e-6)
    assert one[1] == pytest.approx(many[1], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("processes", [1, 2])
def test_next_values_operator_with_short_and_long_rounds_and_no_shortfall(processes):
    """Rounds of 0 and 3 groups (matrix product) beside one of 500 (FFT), in any order; and a shortfall limit of 0."""
    sizes = [500, 0, 3]
    head = beta_binomial_head(sizes, 2.0, 3.0, 40)
    survivals = np.cumsum(head[:, ::-1], axis=1)[:, ::-1]
    values = np.linspace(5.0, 100.0, 41)  # values[0] > 0: the tail term too
    direct = expected_next_values(values, survivals, processes)
    assert next_values_operator(survivals, processes)(values) == pytest.approx(direct, rel=1e-12, abs=1e-9)
    nothing = np.ones((2, 1))
    assert next_values_operator(nothing, processes)(np.array([7.0])).tolist() == [[7.0], [7.0]]
