"""The refill planner: Beta-Binomial tails, budget and caps, convergence, retention 0, monotonicity, checkpoints.

Most tests here pin the fill-chance rule (`confidence=0.95`); the cost-aware default is tested in test_round_cost.py.
"""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner, fixed_first_refill, plan_refill_groups
from trl_dapo_ext.dynamic_sampling.retention import RetentionEstimate, at_least_probability, beta_binomial_pmf


def run_steps(planner: RefillPlanner, retention: float, steps: int, target: int = 32, seed: int = 0) -> list[int]:
    """Drive the planner through ``steps`` steps at a fixed retention; return the round count of each step."""
    rng = random.Random(seed)
    rounds_per_step = []
    for _ in range(steps):
        planned, kept, rounds = target + planner.first_round(target), 0, 0
        while planned:
            informative = sum(rng.random() < retention for _ in range(planned))
            planner.observe(planned, informative)
            kept, rounds = kept + informative, rounds + 1
            if kept >= target or rounds == 10:
                break
            planned = planner.next_round(target - kept, rounds_left=10 - rounds)
        planner.end_step()
        rounds_per_step.append(rounds)
    return rounds_per_step


# --- distributions --------------------------------------------------------------------------------------------------


def test_beta_binomial_with_a_uniform_rate_makes_every_count_equally_likely():
    assert beta_binomial_pmf(5, 1.0, 1.0) == pytest.approx([1 / 6] * 6)


def test_beta_binomial_with_a_sharp_rate_is_the_binomial():
    pmf = beta_binomial_pmf(6, 0.3 * 1e7, 0.7 * 1e7)
    binomial = [math.comb(6, k) * 0.3**k * 0.7 ** (6 - k) for k in range(7)]
    assert pmf == pytest.approx(binomial, rel=1e-4)


def test_tail_of_a_sum_matches_brute_force():
    a, b = beta_binomial_pmf(3, 2.0, 5.0), beta_binomial_pmf(4, 3.0, 1.0)
    for needed in range(0, 9):
        brute = sum(pa * pb for x, pa in enumerate(a) for y, pb in enumerate(b) if x + y >= needed)
        assert at_least_probability(needed, [(3, 2.0, 5.0), (4, 3.0, 1.0)]) == pytest.approx(brute)


def test_retention_estimate_forgets_old_steps():
    estimate = RetentionEstimate(prior_mean=0.5, prior_strength=2.0)
    estimate.fold(attempted=100, informative=100, decay=0.5)
    for _ in range(10):
        estimate.fold(attempted=100, informative=0, decay=0.5)
    assert estimate.mean() < 0.01
    assert min(estimate.alpha_beta()) > 0  # the prior keeps the posterior proper


def test_each_step_decays_the_evidence_once():
    """The trainer closes a step with end_step() and the next first_round() calls it again: the second call must
    not decay the estimates once more (decay 0.5 per step, three steps of 4 groups, 2 informative each)."""
    planner = RefillPlanner(decay=0.5)
    for _ in range(3):
        planner.first_round(4)
        planner.observe(attempted=4, informative=2)
        planner.end_step()
        planner.end_step()  # closing twice changes nothing
    planner.first_round(4)
    (estimate,) = planner.estimates.values()
    # by hand: 2 + 0.5 * (2 + 0.5 * 2) = 3.5 informative, the same uninformative
    assert (estimate.informative, estimate.uninformative) == (3.5, 3.5)


# --- budget and caps ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    target=st.integers(1, 24),
    max_oversample=st.floats(1.0, 5.0),
    budget=st.one_of(st.none(), st.integers(1, 120)),
    retentions=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4),
    confidence=st.floats(0.5, 0.999),
)
def test_never_requests_more_than_the_round_cap_or_the_step_budget(
    target, max_oversample, budget, retentions, confidence
):
    planner = RefillPlanner(max_oversample=max_oversample, max_groups_per_step=budget, confidence=confidence)
    cap = math.ceil(target * max_oversample)
    for retention in retentions:
        refill = planner.first_round(target, rounds_left=3)
        assert 0 <= refill <= cap - target
        total = target + refill
        planner.observe(total, int(retention * total))
        for rounds_left in (2, 1):  # the batch is never filled here: ask twice more
            refill = planner.next_round(missing_groups=target, rounds_left=rounds_left)
            assert 0 <= refill <= cap
            total += refill
            planner.observe(refill, int(retention * refill))
        if budget is not None:
            assert total <= max(budget, target)  # the batch's own groups are there whatever the budget
        planner.end_step()


def test_a_spent_budget_returns_zero_and_a_positive_one_at_least_one():
    planner = RefillPlanner(confidence=0.95, max_oversample=2.0, max_groups_per_step=20)
    assert planner.first_round(8) == 8  # cap 16 - 8 (no evidence yet: the largest round allowed)
    planner.observe(16, 0)
    assert planner.next_round(missing_groups=8) == 4  # what is left of 20
    planner.observe(4, 0)
    assert planner.next_round(missing_groups=8) == 0  # budget spent: the trainer stops
    planner = RefillPlanner(confidence=0.95)
    planner.first_round(8)
    planner.observe(8, 8)
    assert planner.next_round(missing_groups=1) >= 1  # something missing and budget left: never 0


@settings(max_examples=200, deadline=None)
@given(
    target=st.integers(1, 16),
    oversample=st.floats(1.0, 5.0),
    budget=st.one_of(st.none(), st.integers(1, 80)),
    retentions=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=9),
)
def test_the_fixed_factor_rule_keeps_within_the_step_budget(target, oversample, budget, retentions):
    # The rule used when dynamic_sampling_oversample is a number: a first round of ceil(target * oversample) groups,
    # then missing / retention, each round at most the first's size, all of them within the budget.
    first = target + fixed_first_refill(target, oversample, max_groups_per_step=budget)
    expected_first = (
        math.ceil(target * oversample) if budget is None else max(min(math.ceil(target * oversample), budget), target)
    )
    assert first == expected_first
    generated, informative = first, int(retentions[0] * first)
    for retention in retentions[1:]:
        size = plan_refill_groups(
            missing_groups=target,
            attempted_groups=generated,
            informative_groups_seen=informative,
            max_groups=first,
            budget_left=None if budget is None else budget - generated,
        )
        if size == 0:  # the budget is spent: the step stops
            assert budget is not None and generated >= budget
            break
        assert 1 <= size <= first
        generated, informative = generated + size, informative + int(retention * size)
    if budget is not None:
        assert generated <= max(budget, target)  # the batch's own groups are there whatever the budget


def test_the_fixed_factor_rule_with_a_budget_by_hand():
    # DAPO's 3x on a batch of 2 groups under a budget of 2, then of 5 groups per step.
    assert fixed_first_refill(2, 3.0) == 4
    assert fixed_first_refill(2, 3.0, max_groups_per_step=2) == 0
    assert fixed_first_refill(2, 3.0, max_groups_per_step=5) == 3
    # 5 groups generated, 1 of 2 informative so far (retention 1/5): missing 1 asks for 5, the budget leaves 2 or 0.
    plan = dict(missing_groups=1, attempted_groups=5, informative_groups_seen=1, max_groups=5)
    assert plan_refill_groups(**plan) == 5
    assert plan_refill_groups(**plan, budget_left=2) == 2
    assert plan_refill_groups(**plan, budget_left=0) == 0


def test_nothing_missing_needs_no_round():
    planner = RefillPlanner(confidence=0.95)
    planner.first_round(8)
    assert planner.next_round(missing_groups=0) == 0
    assert planner.first_round(0) == 0


# --- convergence and calibration ------------------------------------------------------------------------------------


@pytest.mark.parametrize("retention", [0.25, 0.5, 0.8])
def test_converges_to_missing_over_retention_plus_a_margin(retention):
    planner = RefillPlanner(confidence=0.95, max_oversample=8.0)
    run_steps(planner, retention, steps=30, target=32)
    first = 32 + planner.first_round(32)
    assert 32 / retention <= first <= 1.6 * 32 / retention
    planner.observe(first, int(first * retention))
    later = planner.next_round(missing_groups=20)
    assert 20 / retention <= later <= 1.8 * 20 / retention


def test_one_round_suffices_about_as_often_as_the_confidence_says():
    rounds = run_steps(RefillPlanner(confidence=0.9), retention=0.5, steps=300, target=32, seed=1)
    one_round = sum(r == 1 for r in rounds[10:]) / len(rounds[10:])  # after a short warm-up
    assert 0.85 <= one_round <= 0.99  # calibrated: not far from 0.9 either way


def test_higher_confidence_means_fewer_second_rounds():
    loose = run_steps(RefillPlanner(confidence=0.6), retention=0.5, steps=150, seed=2)
    tight = run_steps(RefillPlanner(confidence=0.99), retention=0.5, steps=150, seed=2)
    assert sum(tight) < sum(loose)


def test_follows_a_drifting_retention():
    planner = RefillPlanner(confidence=0.95, max_oversample=8.0)
    run_steps(planner, retention=0.8, steps=20)
    high = planner.first_round(32)
    planner.end_step()
    run_steps(planner, retention=0.3, steps=20)
    assert planner.first_round(32) > 2 * high


# --- retention 0 ----------------------------------------------------------------------------------------------------


def test_retention_zero_asks_for_the_largest_round_without_dividing_by_zero():
    planner = RefillPlanner(confidence=0.95, max_oversample=3.0, prior_strength=1e-9)
    for _ in range(50):
        assert planner.first_round(10) == 20
        planner.observe(30, 0)
        assert planner.next_round(missing_groups=10, rounds_left=1) == 30
        planner.observe(30, 0)
        planner.end_step()
    assert planner.expected_retention() < 1e-6


# --- monotonicity ---------------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(attempted=st.integers(1, 200), data=st.data(), missing=st.integers(1, 30))
def test_plans_grow_with_what_is_missing_and_shrink_with_retention(attempted, data, missing):
    informative = data.draw(st.integers(0, attempted))

    def plan(informative_seen: int, missing_groups: int, **kwargs) -> int:
        planner = RefillPlanner(**{"confidence": 0.95, "max_oversample": 6.0, **kwargs})
        planner.first_round(32)
        planner.observe(attempted, informative_seen)
        return planner.next_round(missing_groups)

    assert plan(informative, missing) <= plan(informative, missing + 1)
    if informative < attempted:
        assert plan(informative + 1, missing) <= plan(informative, missing)
    assert plan(informative, missing, confidence=0.8) <= plan(informative, missing, confidence=0.99)
    assert plan(informative, missing) <= plan(informative, missing, num_processes=4)


def test_the_last_round_aims_higher():
    planner = RefillPlanner(confidence=0.95, max_oversample=8.0)
    run_steps(planner, 0.5, steps=10)
    planner.first_round(32)
    planner.observe(64, 24)
    assert planner.next_round(8, rounds_left=1) > planner.next_round(8, rounds_left=5)


# --- strata ---------------------------------------------------------------------------------------------------------


def poisson_binomial_at_least(needed: int, rates: list[float]) -> float:
    """Brute force: P(at least ``needed`` successes) for independent Bernoulli groups (2^n outcomes)."""
    total = 0.0
    for outcome in itertools.product((0, 1), repeat=len(rates)):
        if sum(outcome) >= needed:
            total += math.prod(r if o else 1 - r for r, o in zip(rates, outcome))
    return total


def sharp_planner(rates: dict[str, float], **kwargs) -> RefillPlanner:
    """A planner whose per-stratum estimates are (almost) exact: a huge evidence count at the given rates."""
    planner = RefillPlanner(decay=1.0, **{"confidence": 0.95, **kwargs})
    for stratum, rate in rates.items():
        planner.observe(10**7, round(rate * 10**7), stratum=stratum)
    planner.end_step()
    return planner


@settings(max_examples=40, deadline=None)
@given(
    own=st.lists(st.sampled_from("hc"), min_size=1, max_size=5),
    stream=st.lists(st.sampled_from("hc"), min_size=8, max_size=8),
    confidence=st.floats(0.3, 0.95),
)
def test_round_size_is_the_smallest_that_reaches_the_confidence_by_brute_force(own, stream, confidence):
    rates = {"h": 0.8, "c": 0.15}
    planner = sharp_planner(rates, confidence=confidence, max_oversample=3.0)
    target = len(own)
    refill = planner.first_round(target, own=[own], candidates=lambda n: stream[:n])
    upper = min(2 * target, len(stream))

    def exact(k: int) -> float:
        return poisson_binomial_at_least(target, [rates[s] for s in own + stream[:k]])

    if refill < upper:  # the plan reaches the confidence, and one group fewer would not
        assert exact(refill) >= confidence - 1e-4
    assert refill == 0 or exact(refill - 1) < confidence + 1e-4


def test_two_processes_must_both_fill_and_take_contiguous_shares():
    rates = {"h": 0.9, "c": 0.1}
    stream = list("hhhhcccc" * 4)
    two = sharp_planner(rates, confidence=0.9, num_processes=2, max_oversample=4.0)
    refill = two.first_round(2, own=[["h", "h"], ["c", "c"]], candidates=lambda n: stream[:n])

    # process 0 gets stream[0:k], process 1 stream[k:2k]; both must reach 2 informative groups with chance >= 0.9
    def both(k: int) -> float:
        first = poisson_binomial_at_least(2, [rates[s] for s in ["h", "h", *stream[:k]]])
        second = poisson_binomial_at_least(2, [rates[s] for s in ["c", "c", *stream[k : 2 * k]]])
        return first * second

    assert both(refill) >= 0.9 - 1e-4 > both(refill - 1)
    # a process that already has its groups does not count
    one = sharp_planner(rates, confidence=0.9, max_oversample=4.0)
    one.first_round(2, own=[["c", "c"]])
    hot = lambda n: ["h"] * n  # noqa: E731
    assert two.next_round([0, 3], candidates=hot) == one.next_round(3, candidates=hot) > 3


def test_strata_trust_a_better_refill_stream():
    def learn(stratified: bool) -> RefillPlanner:
        planner = RefillPlanner(confidence=0.95, max_oversample=8.0)
        for _ in range(10):
            refill = planner.first_round(32)
            planner.observe(32, 8, stratum="cold" if stratified else "all")  # retention 1/4
            planner.observe(refill, int(refill * 0.8), stratum="hot" if stratified else "all")  # 4/5
            planner.end_step()
        return planner

    pooled, stratified = learn(False), learn(True)
    hot_stream = lambda n: ["hot"] * n  # noqa: E731
    cold_batch = [["cold"] * 32]
    assert stratified.first_round(32, own=cold_batch, candidates=hot_stream) < pooled.first_round(32)
    assert stratified.expected_retention("hot") > 0.7 > 0.3 > stratified.expected_retention("cold")
    # an unseen stratum starts from the pooled rate, not from the fixed prior
    assert stratified.expected_retention("never seen") == pytest.approx(stratified.expected_retention(), abs=0.05)


def test_knowing_the_strata_costs_less_surplus_at_the_same_shortfall_rate():
    """Two kinds of prompts (retention 0.9 and 0.05), mixed half and half: an unstratified planner sees one rate of
    about 1/2 and must cover the mix's variance; a stratified one knows which prompts a round holds."""
    rng = random.Random(3)
    rates = {"hot": 0.9, "cold": 0.05}
    results = {}
    for stratified in (False, True):
        planner = RefillPlanner(confidence=0.95, max_oversample=6.0)
        generated = short = 0
        for step in range(300):
            kinds = [rng.choice(("hot", "cold")) for _ in range(200)]
            labels = kinds if stratified else ["all"] * len(kinds)
            refill = planner.first_round(
                16, own=[labels[:16]], candidates=lambda n, labels=labels: labels[16 : 16 + n]
            )
            round_kinds = kinds[: 16 + refill]
            outcomes = [rng.random() < rates[k] for k in round_kinds]
            for kind, informative in zip(round_kinds, outcomes):
                planner.observe(1, int(informative), stratum=kind if stratified else "all")
            planner.end_step()
            if step >= 20:
                generated += len(round_kinds)
                short += sum(outcomes) < 16
        results[stratified] = (generated, short)
    assert results[True][0] < 0.95 * results[False][0]  # fewer groups generated...
    assert results[True][1] <= results[False][1] + 10  # ...without falling short much more often


# --- checkpoints and validation -------------------------------------------------------------------------------------


def test_state_round_trip_gives_identical_plans():
    original = RefillPlanner()
    run_steps(original, 0.4, steps=7)
    original.first_round(32)
    original.observe(40, 17, stratum="informative")  # a step in progress, in a stratum
    original.observe(8, 1, stratum="all_max")
    restored = RefillPlanner()
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    assert restored.state_dict() == original.state_dict()
    stream = lambda n: ["informative", "all_max", "unseen"][: n % 3] * n  # noqa: E731
    assert restored.next_round(9, rounds_left=3, candidates=stream) == original.next_round(9, 3, candidates=stream)
    restored.end_step(), original.end_step()
    assert restored.first_round(32) == original.first_round(32)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_oversample": 0.5},
        {"max_groups_per_step": 0},
        {"confidence": 1.0},
        {"last_round_confidence": 0.0},
        {"decay": 1.5},
        {"prior_retention": 0.0},
        {"num_processes": 0},
    ],
)
def test_rejects_invalid_settings(kwargs):
    with pytest.raises(ValueError):
        RefillPlanner(**kwargs)


def test_rejects_impossible_counts():
    planner = RefillPlanner()
    with pytest.raises(ValueError):
        planner.observe(attempted=3, informative=4)
    with pytest.raises(ValueError):
        planner.first_round(4, own=[["all"] * 3])  # one stratum per own group
    with pytest.raises(ValueError):
        planner.next_round([1, 2])  # one missing count per process (here 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["unseen", "informative", "all_max"]), st.booleans()), max_size=30))
def test_observing_groups_equals_observing_each_stratum_count(groups):
    by_groups, by_counts = RefillPlanner(), RefillPlanner()
    by_groups.observe_groups([s for s, _ in groups], [kept for _, kept in groups])
    for stratum in {s for s, _ in groups}:
        mine = [kept for s, kept in groups if s == stratum]
        by_counts.observe(len(mine), sum(mine), stratum=stratum)
    assert by_groups.state_dict() == by_counts.state_dict()
    with pytest.raises(ValueError):
        by_groups.observe_groups(["unseen"], [True, False])


def test_the_planner_state_does_not_depend_on_the_process_hash_seed():
    """Every process of a run must plan alike, and each starts with its own string-hash seed (unless PYTHONHASHSEED
    is set): the estimates, and the pooled sums over them, must come out in the same order whatever the seed."""
    import os
    import subprocess
    import sys

    code = (
        "import json\n"
        "from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner\n"
        "planner = RefillPlanner(generations=4)\n"
        "strata = ['predicted 0.1-0.2', 'unseen', 'predicted 0.5-0.6', 'all', 'predicted 0.9-1', 'last H', 'last L']\n"
        "for step in range(3):\n"
        "    planner.first_round(4)\n"
        "    planner.observe_groups(strata[step:] + strata[:step], [i % 3 == step for i in range(len(strata))])\n"
        "    planner.end_step()\n"
        "print(json.dumps([list(planner.estimates), planner.expected_retention().hex(), planner.state_dict()]))\n"
    )
    outputs = set()
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1
