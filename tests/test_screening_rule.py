"""Screening's decision rule and budget accounting (trl_dapo_ext.dynamic_sampling.screening): worked numbers by hand,
and properties against brute force (exact enumeration over Binomial outcomes, or a seeded simulation of whole steps)."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext.dynamic_sampling.screening import (
    AGREE_HIGH,
    AGREE_LOW,
    ScreeningEstimates,
    StratifiedRate,
    completion_rate,
    informative_after_agreement,
    mixed_chance,
    probe_rule_bound,
    screening_rate,
    stream_rate,
    worth_completing,
)

successes = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6)
sizes = st.integers(2, 10).flatmap(lambda G: st.tuples(st.integers(1, G - 1), st.just(G)))  # (k, G), 1 <= k < G


def binomial(n: int, j: int, p: float) -> float:
    return math.comb(n, j) * p**j * (1 - p) ** (n - j)


def outcome_law(p: float, k: int, G: int):
    """Every outcome of a prompt screened with k probes then completed to G: (right of k, right of the rest, chance)."""
    for j in range(k + 1):
        for m in range(G - k + 1):
            yield j, m, binomial(k, j, p) * binomial(G - k, m, p)


# --- worked numbers ------------------------------------------------------------------------------------------------


def test_worked_numbers_of_the_rates():
    # A stratum with retention r_G = 0.5 and mixed rate q_k = 0.2 at G = 8, k = 2:
    # c = (0.5 - 0.2) / (1 - 0.2) = 0.375; completing costs 6: 0.375 / 6 = 0.0625 informative groups per completion.
    assert informative_after_agreement(0.5, 0.2) == pytest.approx(0.375)
    assert completion_rate(0.375, 2, 8) == pytest.approx(0.0625)
    # Screening a stream prompt with q = 0.2: 2 probes + 0.2 * 6 = 3.2 completions per 0.2 groups: 0.0625 per
    # completion; screening then completing all: 0.5 / 8 = 0.0625 too (the mediant of two equal rates).
    assert screening_rate(0.2, 2, 8) == pytest.approx(0.0625)
    assert stream_rate(0.5, 0.2, 2, 8) == pytest.approx(0.0625)
    # A tie completes (>=): the prompt is as good as the stream.
    assert worth_completing(0.375, 2, 8, 0.0625)
    # With a round latency of 16 completions shared by 10 new prompts: 10 * 0.2 / (10 * 3.2 + 16) = 2 / 48;
    # completing all of them: 10 * 0.5 / (80 + 16) = 5 / 96 = 0.052 beats it; the agreeing prompt (0.0625) still wins.
    assert screening_rate(0.2, 2, 8, latency=16.0, prompts=10) == pytest.approx(2 / 48)
    assert stream_rate(0.5, 0.2, 2, 8, latency=16.0, prompts=10) == pytest.approx(5 / 96)
    assert worth_completing(0.375, 2, 8, stream_rate(0.5, 0.2, 2, 8, latency=16.0, prompts=10))
    # Mixed prompts only: agreement is impossible, nothing to complete.
    assert informative_after_agreement(1.0, 1.0) == 0.0
    assert not worth_completing(0.0, 2, 8, 0.0)
    with pytest.raises(ValueError, match="probes"):
        screening_rate(0.5, 8, 8)


def test_worked_estimates_and_checkpoint():
    estimates = ScreeningEstimates(decay=0.5, prior_strength=2.0)
    # Step 1: stratum "a" screens 4 prompts, 2 mixed; 1 agreeing-low completed, informative.
    estimates.observe_probes(["a"] * 4, [True, True, False, False])
    estimates.observe_completions(["a"], [AGREE_LOW], [True])
    estimates.end_step()
    # Step 2: "a" screens 2 more, none mixed. Weights: step 1 at 0.5, step 2 at 1 (folded at its end).
    estimates.observe_probes(["a", "a"], [False, False])
    estimates.end_step()
    # mixed: hits 0.5 * 2 = 1, misses 0.5 * 2 + 2 = 3; pooled = only "a": (1 + 1) / (2 + 4) = 1/3 is the prior mean.
    # "a": (1/3 * 2 + 1) / (2 + 4) = (5/3) / 6 = 0.2778.
    assert estimates.mixed_rate() == pytest.approx(1 / 3)
    assert estimates.mixed_rate("a") == pytest.approx(5 / 18)
    # completed, direction "low" of "a": hits 0.5; the pooled mean over "a" and "a|low" (1 + 1) / (2 + 1) = 2/3
    # ("a" and its direction count once each); "a|low": (2/3 * 2 + 0.5) / (2 + 0.5) = 0.7333.
    assert estimates.after_agreement("a", AGREE_LOW) == pytest.approx((4 / 3 + 0.5) / 2.5)
    # A direction never measured falls back to its stratum: the same numbers as "a|low", by symmetry.
    assert estimates.after_agreement("a", AGREE_HIGH) == pytest.approx(estimates.after_agreement("a"))
    restored = ScreeningEstimates(decay=0.5, prior_strength=2.0)
    restored.load_state_dict(estimates.state_dict())
    assert restored.state_dict() == estimates.state_dict()
    assert restored.retention("a") == estimates.retention("a")


# --- properties against brute force --------------------------------------------------------------------------------


@given(p=st.floats(0.0, 1.0), k=st.integers(1, 8))
def test_mixed_chance_enumerates_every_outcome_sequence(p, k):
    chance = sum(
        math.prod(p if right else 1 - p for right in outcome)
        for outcome in itertools.product((True, False), repeat=k)
        if len(set(outcome)) > 1
    )
    assert mixed_chance(p, k) == pytest.approx(chance, abs=1e-12)


@given(population=successes, size=sizes)
def test_informative_after_agreement_is_the_conditional_chance(population, size):
    k, G = size
    agree = agree_and_informative = 0.0
    for p in population:
        for j, m, chance in outcome_law(p, k, G):
            if j in (0, k):
                agree += chance
                agree_and_informative += chance * (0 < j + m < G)
    r = float(np.mean([mixed_chance(p, G) for p in population]))
    q = float(np.mean([mixed_chance(p, k) for p in population]))
    expected = agree_and_informative / agree if agree > 1e-12 else 0.0
    if agree > 1e-9:
        assert informative_after_agreement(r, q) == pytest.approx(expected, abs=1e-7)


def policy_rate(population, k, G, complete_agreeing: bool, latency=0.0, prompts=1) -> float:
    """Exact informative groups per completion of screening stream prompts and completing mixed (and agreeing)."""
    cost = groups = 0.0
    for p in population:
        for j, m, chance in outcome_law(p, k, G):
            mixed = 0 < j < k
            completed = mixed or complete_agreeing
            cost += chance * (k + (G - k) * completed)
            groups += chance * (completed and 0 < j + m < G)
    cost, groups = cost / len(population), groups / len(population)
    return prompts * groups / (prompts * cost + latency)


@given(population=successes, size=sizes, latency=st.floats(0.0, 100.0), prompts=st.integers(1, 64))
def test_the_stream_rate_is_the_better_of_the_two_policies_enumerated(population, size, latency, prompts):
    k, G = size
    r = float(np.mean([mixed_chance(p, G) for p in population]))
    q = float(np.mean([mixed_chance(p, k) for p in population]))
    screen_only = policy_rate(population, k, G, False, latency, prompts)
    assert screening_rate(q, k, G, latency, prompts) == pytest.approx(screen_only, abs=1e-9)
    best = max(screen_only, policy_rate(population, k, G, True, latency, prompts))
    assert stream_rate(r, q, k, G, latency, prompts) == pytest.approx(best, abs=1e-9)


@given(stratum=successes, stream=successes, size=sizes, budget=st.integers(50, 500))
def test_completing_an_agreeing_prompt_is_worth_it_iff_it_gains_groups_at_a_fixed_budget(
    stratum, stream, size, budget
):
    """Brute force: a budget spent on one agreeing prompt's completion plus the stream, against on the stream only."""
    k, G = size
    c = informative_after_agreement(
        float(np.mean([mixed_chance(p, G) for p in stratum])), float(np.mean([mixed_chance(p, k) for p in stratum]))
    )
    # The stream's best use of a completion, from the two policies enumerated (any amount: expected values scale).
    rate = max(policy_rate(stream, k, G, False), policy_rate(stream, k, G, True))
    with_it, without = c + rate * (budget - (G - k)), rate * budget
    opportunity = stream_rate(
        float(np.mean([mixed_chance(p, G) for p in stream])),
        float(np.mean([mixed_chance(p, k) for p in stream])),
        k,
        G,
    )
    if abs(with_it - without) > 1e-9:
        assert worth_completing(c, k, G, opportunity) == (with_it > without)


@settings(deadline=None)
@given(population=successes, k=st.integers(2, 4), extra=st.integers(1, 6))
def test_the_probe_rule_bound_is_the_best_of_every_rule_on_probe_counts(population, k, extra):
    """Brute force over every deterministic rule: complete or drop after j right probes, j = 0..k (2^(k+1) rules)."""
    G = k + extra
    best = math.inf
    for rule in itertools.product((False, True), repeat=k + 1):
        cost = groups = 0.0
        for p in population:
            for j, m, chance in outcome_law(p, k, G):
                cost += chance * (k + (G - k) * rule[j])
                groups += chance * (rule[j] and 0 < j + m < G)
        if groups > 1e-12:
            best = min(best, cost / groups)
    bound, _ = probe_rule_bound(np.array(population), k, G)
    if best < 1e4 * G:  # past that 1 - p^k - (1 - p)^k cancels (p near 0 or 1): both sides lose digits
        assert bound == pytest.approx(best, rel=1e-9)
    assert bound >= G - 1e-9  # never below the floor: every informative group holds G completions


@given(
    steps=st.lists(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=8), min_size=1, max_size=5),
    decay=st.floats(0.0, 1.0),
)
def test_stratified_rates_are_decayed_counts_with_a_pooled_prior(steps, decay):
    rate = StratifiedRate(decay=decay, prior_mean=0.5, prior_strength=2.0)
    weights = {}  # brute force: each observation's weight is decay ** (steps after its own)
    for number, step in enumerate(steps):
        rate.observe([key for key, _ in step], [hit for _, hit in step])
        rate.end_step()
        for key, hit in step:
            weights.setdefault(key, []).append((number, hit))
    last = len(steps) - 1

    def weighted(key, want):
        return sum(decay ** (last - n) for n, hit in weights.get(key, []) if hit == want)

    hits = sum(weighted(key, True) for key in weights)
    misses = sum(weighted(key, False) for key in weights)
    pooled = (1 + hits) / (2 + hits + misses)
    assert rate.mean() == pytest.approx(pooled)
    for key in "abc":
        expected = (2 * pooled + weighted(key, True)) / (2 + weighted(key, True) + weighted(key, False))
        assert rate.mean(key) == pytest.approx(expected)


RESUME_ESTIMATES = r"""
import json, sys
from trl_dapo_ext.dynamic_sampling.screening import ScreeningEstimates
estimates = ScreeningEstimates(decay=0.8)
if len(sys.argv) > 1:  # resume a saved state
    estimates.load_state_dict(json.loads(sys.argv[1]))
    print(" ".join(estimates.mixed_rate(s).hex() for s in [None, "3", "unseen"]), estimates.retention().hex())
else:  # a run's state: decayed, non-integer counts in many strata
    strata = ["unseen", *map(str, range(12))]
    for step in range(6):
        estimates.observe_probes(strata, [(step * 7 + i) % 3 == 0 for i in range(len(strata))])
        estimates.observe_completions(strata[:5], ["high", "low", "high", "low", "high"], [True, False] * 2 + [True])
        estimates.end_step()
    print(json.dumps(estimates.state_dict()))
"""


def test_resumed_estimates_agree_across_interpreters():
    """The saved screening state resumes to the same estimates, to the last bit, in interpreters with different
    string-hash seeds (as several processes, or a resumed run, have): strata are pooled in a fixed order."""
    import subprocess
    import sys

    def run(seed: int, *args: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        command = [sys.executable, "-c", RESUME_ESTIMATES, *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.strip()

    state = run(0)
    assert len({run(seed, state) for seed in range(1, 9)}) == 1
