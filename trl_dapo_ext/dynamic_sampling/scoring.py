"""Scoring many round sizes at once: the planner's fast search for large batches (past ``RefillPlanner.exact_up_to``).

A candidate round's score is its expected cost of what is left, ``E[values[m']]``, and its chance to fill the batch;
the scorers take a batch of candidate sizes and return both, in O(L) (one process short) or O(L log L) (several) per
candidate instead of the direct search's O(L^2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from .cost_search import cheapest_or_stop
from .retention import beta_binomial_band, beta_binomial_rows, cached_beta_binomial_head
from .round_cost import Costs, fft_convolve, least_cost_between, size_grid

PLAN_TOLERANCE = 0.002  # the plan's expected cost is within this fraction of the best size's (the refinement)

Scorer = Callable[[list[int]], tuple[np.ndarray, np.ndarray]]  # refill counts -> (E[values[m']], fill chance)


def own_distribution(
    need: int, strata: tuple[tuple[str, int], ...], posteriors: dict[str, tuple[float, float]], limit: int
) -> np.ndarray:
    """``P(Y = y)`` for ``y < need``, ``Y`` the informative count of a process's own groups (``(stratum, count)``).

    Counts of ``need`` and more fill the process however they combine with refill groups, so every law is cut to
    its first ``need`` entries (``need`` of them: the result is padded with zeros).

    Example:
        >>> own_distribution(2, (("a", 1),), {"a": (1.0, 1.0)}, limit=2).tolist()  # one group, uniform rate
        [0.5, 0.5]
    """
    distribution = np.ones(1)
    for stratum, trials in strata:
        head = cached_beta_binomial_head(trials, *posteriors[stratum], limit)
        distribution = fft_convolve(distribution[:need], head[:need])[:need]
    return np.concatenate((distribution, np.zeros(need - len(distribution))))


def one_short_scorer(distribution: np.ndarray, need: int, refill: tuple[float, float], values: np.ndarray) -> Scorer:
    """Scores of refill counts when a single process is short by ``need``: linear in the refill count's law.

    The next shortfall is ``(need - O - R)^+`` (``O`` own, ``R`` refill informative counts, independent), so
    ``E[values[m']] = sum_r P(R = r) W[r]`` with ``W[r] = sum_o P(O = o) values[need - r - o]`` over
    ``r + o < need`` (and ``values[0]`` when the process fills): ``W`` is one FFT correlation per decision, and each
    candidate costs one Beta-Binomial row and one dot product, O(L). ``distribution``: :func:`own_distribution`.

    Example:
        >>> scorer = one_short_scorer(np.array([1.0]), 1, (1.0, 1.0), np.array([0.0, 10.0]))  # no own groups
        >>> [a.round(3).tolist() for a in scorer([0, 1])]  # 0 refill groups: short; 1: informative half the time
        [[10.0, 5.0], [0.0, 0.5]]
    """
    own = np.zeros(need)
    own[: min(len(distribution), need)] = distribution[:need]
    weights = fft_convolve(own[::-1], values[need:0:-1])[need - 1 : 2 * need - 1]  # values[need - s] at s
    misses = np.cumsum(own)[::-1]  # misses[r] = P(O < need - r): the process stays short with r refill ones

    def score(refills: list[int]) -> tuple[np.ndarray, np.ndarray]:
        band = beta_binomial_band(refills, *refill, need)
        if band is None:
            rows = beta_binomial_rows(refills, *refill, need)[:, :need]
            left, stay = rows @ weights, rows @ misses
        else:  # only where the rows hold their mass (the rest is below 1e-18 of it)
            starts, rows = band
            at = starts[:, None] + np.arange(rows.shape[1])[None, :]
            left, stay = np.einsum("ij,ij->i", rows, weights[at]), np.einsum("ij,ij->i", rows, misses[at])
        fill = np.clip(1.0 - stay, 0.0, 1.0)
        return left + fill * values[0], fill

    return score


def many_short_scorer(
    owned: list[tuple[int, np.ndarray, int]], limit: int, refill: tuple[float, float], values: np.ndarray
) -> Scorer:
    """Scores of refill counts when several processes are short: ``owned`` holds ``(need, own distribution,
    processes alike)`` (processes with the same shortfall and strata are one factor raised to their number).

    The next shortfall is the largest one left, so ``P(m' <= j)`` is the product of the processes' chances to
    bring at least ``need - j``; each distinct process costs one batch of FFT convolutions of its own law with the
    candidates' refill rows, O(L log L) per candidate.
    """
    transforms = []
    for need, distribution, count in owned:
        size = 1 << max(2 * need - 2, 0).bit_length()
        transforms.append((need, np.fft.rfft(distribution[:need], size), size, count))
    shortfalls = np.arange(limit + 1)

    def score(refills: list[int]) -> tuple[np.ndarray, np.ndarray]:
        rows = beta_binomial_rows(refills, *refill, limit)  # trials 0: all mass on 0
        cdf = np.ones((len(refills), limit + 1))  # P(m' <= j): every process short by at most j
        for need, transform, size, count in transforms:
            spread = np.fft.irfft(transform[None, :] * np.fft.rfft(rows[:, :need], size, axis=1), size, axis=1)
            below = np.maximum(spread[:, :need], 0.0)
            # tail[t] = P(Y >= t) = 1 - P(Y < t) for t = 0..need
            tail = np.clip(1.0 - np.cumsum(below, axis=1), 0.0, 1.0)
            tail = np.concatenate((np.ones((len(refills), 1)), tail), axis=1)
            cdf *= tail[:, np.clip(need - shortfalls, 0, None)] ** count
        pmf = np.diff(cdf, axis=1, prepend=0.0)
        return pmf @ values, pmf[:, 0]

    return score


def grouped_scorer(
    needed: Sequence[int],
    own: Sequence[Sequence[str]],
    posteriors: dict[str, tuple[float, float]],
    refill_posterior: tuple[float, float],
    values: np.ndarray,
) -> Scorer:
    """The scorer for these shortfalls (``needed``, ``own``: one entry per process): :func:`one_short_scorer` when a
    single process is short, else :func:`many_short_scorer`, processes with the same shortfall and own strata
    counted once."""
    limit = max(needed)
    groups: Counter = Counter()
    for p in range(len(needed)):
        if needed[p] > 0:
            groups[(needed[p], tuple(sorted(Counter(own[p]).items())))] += 1
    owned = {key: own_distribution(*key, posteriors, limit) for key in groups}
    if len(groups) == 1 and sum(groups.values()) == 1:
        (need, _), distribution = next(iter(owned.items()))
        return one_short_scorer(distribution, need, refill_posterior, values)
    alike = [(key[0], owned[key], count) for key, count in groups.items()]
    return many_short_scorer(alike, limit, refill_posterior, values)


def cheapest_refill_fast(
    costs: Costs,
    needed: Sequence[int],
    own: Sequence[Sequence[str]],
    posteriors: dict[str, tuple[float, float]],
    refill_posterior: tuple[float, float],
    values: np.ndarray,
    lower: int,
    upper: int,
) -> tuple[int, tuple[float, float]]:
    """``RefillPlanner``'s cost search for large shortfalls, with the direct search's candidates and scores: the
    refill count in ``[lower, upper]`` and its plan (expected cost, fill chance); 0 when no round is worth its cost.

    The direct search costs O(L^2) per candidate (L = the largest shortfall: every Beta-Binomial row up to the
    round cap, one direct convolution per process and candidate) and scores every size between the coarse grid's
    neighbours of its best point: about O(L^3) per decision. Here:

    * only the Beta-Binomial rows a candidate uses are computed, from shared tables (:func:`beta_binomial_rows`);
    * a process's own groups are convolved with the values once per decision (:func:`fft_convolve`): with one
      process short, a candidate's score is then one dot product with its refill row (:func:`one_short_scorer`,
      O(L)); with several, one FFT convolution per candidate and distinct process (:func:`many_short_scorer`);
    * the refinement scores only the sizes that can still beat the best one (:func:`least_cost_between`: the
      expected cost of what is left falls as the round grows, so a bound rules out whole intervals).

    Scores agree with the direct ones up to rounding (1e-10 relative or better), and the refinement's choice
    costs at most ``PLAN_TOLERANCE`` (0.2%) of the expected cost more than the direct search's choice.
    """
    limit = max(needed)
    scorer = grouped_scorer(needed, own, posteriors, refill_posterior, values)
    fixed = costs.latency + costs.generations * len(own[0])

    def expected(refills: list[int]) -> list[tuple[float, float]]:
        if not refills:
            return []
        left, fill = scorer(refills)
        totals = fixed + costs.generations * np.asarray(refills, dtype=float) + left
        return list(zip(totals.tolist(), fill.tolist()))

    grid = size_grid(upper, lower, dense=8, steps=16) if upper >= lower else [lower]
    scores = dict(zip(grid, expected(grid)))
    best = min(grid, key=lambda n: scores[n][0])
    at = grid.index(best)
    totals = {n: score[0] for n, score in scores.items()}

    def score(refills: list[int]) -> list[float]:
        found = expected(refills)
        scores.update(zip(refills, found))
        return [total for total, _ in found]

    # The cost is flat near its minimum (each extra group costs G and saves about G of later rounds), so an
    # exact refinement would score most sizes between the grid neighbours; a tolerance of PLAN_TOLERANCE of the
    # expected cost lets the bound skip whole intervals and still certifies the plan's gap to the best size.
    tolerance = PLAN_TOLERANCE * abs(totals[best])
    low, high = grid[max(at - 1, 0)], grid[min(at + 1, len(grid) - 1)]
    least_cost_between(score, low, high, costs.generations, totals, tolerance)
    return cheapest_or_stop(scores, lower, limit, costs)
