"""Scoring many round sizes at once: the planner's fast search for large batches (past ``RefillPlanner.exact_up_to``).

A candidate round's score is its expected cost of what is left, ``E[values[m']]``, and its chance to fill the batch;
the scorers take a batch of candidate sizes and return both, in O(L) (one process short) or O(L log L) (several) per
candidate instead of the direct search's O(L^2).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .retention import beta_binomial_band, beta_binomial_rows, cached_beta_binomial_head
from .round_cost import fft_convolve

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
