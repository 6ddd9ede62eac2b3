"""The cost rule for refill rounds (``confidence=None``): the round size with the least expected cost to finish.

A round of ``n`` refill groups costs ``latency + G * (own + n)`` completion-equivalents plus the expected least cost
of what it leaves, ``E[V[m']]`` (:func:`future_values`: :func:`.round_cost.plan_values`' Bellman recursion over the
rounds after it). This module holds what both searches share and the direct search:

* :func:`future_values`: ``V`` for the rounds after this one, every later round drawing exchangeable refill groups;
* :func:`shared_refill_posterior`: the one posterior those refill groups share;
* :func:`cheapest_refill_direct`: the direct search, exact and fast up to ``RefillPlanner.exact_up_to`` groups
  (:func:`.scoring.cheapest_refill_fast` takes over past it, with the same candidates and scores);
* :func:`cheapest_or_stop`: the best scored size, or 0 when no round is worth its cost.

:class:`.planner.RefillPlanner` supplies the costs, posteriors and strata. Pure functions; numpy, no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from .retention import beta_binomial_head, beta_binomial_rows
from .round_cost import Costs, plan_values, size_grid, survival

REFILL = "\x00refill"  # the cost search's one stratum for refill groups (no caller names a stratum so)


def future_values(
    costs: Costs,
    limit: int,
    rounds: int,
    cap: int,
    refill: tuple[float, float],
    processes: int,
    method: str = "direct",
) -> np.ndarray:
    """``V[m]``, the least expected cost to finish from a shortfall ``m`` with ``rounds`` rounds after this one,
    when every later round (at most ``cap`` groups) draws refill groups whose informative chance has the posterior
    ``refill``. ``method``: ``"direct"`` or ``"fft"`` (the fast search's way; the same law, equal up to rounding).

    Example (free rounds, sure groups: nothing is left to pay for):
        >>> costs = Costs(latency=0.0, generations=1, group_value=100.0, exhaustion_penalty=0.0)
        >>> future_values(costs, limit=2, rounds=1, cap=2, refill=(1e9, 1e-9), processes=1).round(6).tolist()
        [0.0, 1.0, 2.0]
    """
    sizes = size_grid(cap, dense=16, steps=24)  # V is smooth in n: a coarse grid beyond 16 groups suffices
    rows = beta_binomial_rows if method == "fft" else beta_binomial_head  # the same law, the fast search's way
    head = rows(sizes, *refill, limit)
    survivals = np.cumsum(head[:, ::-1], axis=1)[:, ::-1]  # P(Y >= t)
    return plan_values(costs, survivals, sizes, rounds, processes, method=method)[rounds]


def shared_refill_posterior(
    peeked: Sequence[str], posteriors: dict[str, tuple[float, float]], pooled: tuple[float, float]
) -> tuple[float, float]:
    """One posterior for every refill group: the mean retention of the stream's next prompts (``peeked``, their
    strata), at the strength of the ``pooled`` posterior (whose mean stands in when nothing is peeked).

    Refill groups are exchangeable on purpose: the stream's order is fixed, so a round that stopped right before a
    run of hopeless prompts would only hand them to the next round. Scoring the stream's prefixes one by one would
    make the cost search chase that order instead of the cost.

    Example:
        >>> shared_refill_posterior(["a", "b"], {"a": (1.0, 3.0), "b": (3.0, 1.0)}, pooled=(2.0, 8.0))
        (5.0, 5.0)
    """
    alpha, beta = pooled
    table = {s: posteriors[s][0] / sum(posteriors[s]) for s in set(peeked)}  # once per stratum, not prompt
    means = np.fromiter(map(table.__getitem__, peeked), float, len(peeked))
    mean = float(np.mean(means)) if len(means) else alpha / (alpha + beta)
    mean = min(max(mean, 1e-9), 1 - 1e-9)
    return mean * (alpha + beta), (1 - mean) * (alpha + beta)


def count_survival(needed: int, counts: Counter, heads: dict[str, np.ndarray]) -> np.ndarray:
    """``P(Y >= t)`` for ``t = 0..needed``, ``Y`` the informative count of groups in these strata.

    ``counts``: groups per stratum; ``heads[stratum][n]``: the truncated law of the informative count of ``n``
    groups of that stratum.
    """
    distribution = np.ones(1)
    for stratum, trials in counts.items():
        head = heads[stratum][trials]
        if len(head) > needed + 1:
            head = np.append(head[:needed], head[needed:].sum())
        distribution = np.convolve(distribution, head)
        if len(distribution) > needed + 1:  # counts of ``needed`` and more all fill the process: one entry
            distribution = np.append(distribution[:needed], distribution[needed:].sum())
    return survival(distribution, needed)


def cheapest_or_stop(
    scores: dict[int, tuple[float, float]], lower: int, limit: int, costs: Costs
) -> tuple[int, tuple[float, float]]:
    """The scored size of least expected cost (the smallest on ties) and its ``(expected cost, fill chance)``; or
    ``0, (stop, 0.0)`` when a round is required (``lower >= 1``) and none costs less than ending the step short by
    ``limit`` groups now (``stop``): the step cannot be saved."""
    best = min(scores, key=lambda n: (scores[n][0], n))
    stop = costs.group_value * limit + costs.exhaustion_penalty  # what ending the step short costs now
    if lower >= 1 and scores[best][0] >= stop:
        return 0, (stop, 0.0)
    return best, scores[best]


def cheapest_refill_direct(
    costs: Costs,
    needed: Sequence[int],
    own: Sequence[Sequence[str]],
    posteriors: dict[str, tuple[float, float]],
    refill_posterior: tuple[float, float],
    values: np.ndarray,
    lower: int,
    upper: int,
) -> tuple[int, tuple[float, float]]:
    """The refill count in ``[lower, upper]`` of least expected cost and its plan (expected cost, fill chance), by
    the direct search; 0 when no round is worth its cost (:func:`cheapest_or_stop`).

    ``needed`` and ``own`` (strata of the batch's own groups) hold one entry per process; own groups count by their
    strata's ``posteriors``, refill groups by ``refill_posterior`` (:func:`shared_refill_posterior`); ``values``:
    :func:`future_values`. Scores a coarse grid, then every size between the best point's grid neighbours. Costs
    O(round cap * L) for the Beta-Binomial rows and O(L^2) per candidate (L = the largest shortfall).
    """
    limit = max(needed)
    most = len(own[0]) + upper  # the most groups of one stratum any candidate puts on a process
    heads = {s: beta_binomial_head(range(most + 1), *ab, limit) for s, ab in posteriors.items()}
    heads[REFILL] = beta_binomial_head(range(upper + 1), *refill_posterior, limit)

    def expected(refill: int) -> tuple[float, float]:
        cdf = np.ones(limit + 1)  # P(m' <= j): every process short by at most j
        for p in range(len(needed)):
            if needed[p] > 0:
                counts = Counter(own[p]) + Counter({REFILL: refill})
                tail = count_survival(needed[p], counts, heads)
                gap = np.clip(needed[p] - np.arange(limit + 1), 0, None)
                cdf *= tail[gap]
        pmf = np.diff(cdf, prepend=0.0)
        groups = len(own[0]) + refill
        return costs.latency + costs.generations * groups + float(pmf @ values), float(pmf[0])

    grid = size_grid(upper, lower, dense=8, steps=16) if upper >= lower else [lower]
    scores = {n: expected(n) for n in grid}
    best = min(grid, key=lambda n: scores[n][0])
    at = grid.index(best)  # refine between the grid points beside the best one
    for n in range(grid[max(at - 1, 0)] + 1, grid[min(at + 1, len(grid) - 1)]):
        if n not in scores:
            scores[n] = expected(n)
    return cheapest_or_stop(scores, lower, limit, costs)
