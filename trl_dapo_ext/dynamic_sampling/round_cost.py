"""What a round costs, and the cheapest way to finish a step: the round-cost model and the Bellman recursion.

A generation round costs a fixed latency plus a cost per completion:

    seconds(round) = fixed_seconds + seconds_per_completion * completions

The fixed part is what a round pays however small it is: the generation call waits for its longest completion,
vLLM syncs weights and schedules, reward workers start. Only the ratio matters for sizing, so the planner works in
**completion-equivalents**: ``latency = fixed_seconds / seconds_per_completion``, and a round of ``n`` groups of ``G``
completions costs ``latency + G * n``. veRL's fixed 3x batch is right when the latency dominates; one-by-one
replacement (OpenRLHF) is right when it is zero. :func:`plan_values` finds the sizes in between that minimise the
expected cost of completing the batch, and :class:`RoundCostModel` measures the latency in the run itself.

Pure functions and one small class; no torch (numpy for the convolutions).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------- the round-cost model


class RoundCostModel:
    """Online robust fit of ``seconds = fixed + per_completion * completions`` from measured rounds.

    The slope is the Theil-Sen estimate (median of the pairwise slopes over the last ``window`` rounds), the
    intercept the median residual: one slow round (a garbage collection, a compile) moves neither. Rounds of one size
    cannot separate the two numbers, so until ``min_pairs`` pairs of rounds of different sizes are seen the latency
    stays at ``prior_latency``; after that the fitted latency is shrunk towards the prior with weight
    ``prior_pairs / (prior_pairs + pairs)``.

    Example:
        >>> model = RoundCostModel(prior_latency=16.0)
        >>> for completions in (64, 128, 64, 256, 32, 128):
        ...     model.observe(completions, seconds=2.0 + 0.05 * completions)  # fixed 2 s = 40 completions
        >>> round(model.latency(), 1), round(model.seconds_per_completion(), 3)
        (38.3, 0.05)
    """

    def __init__(self, prior_latency: float = 16.0, window: int = 64, min_pairs: int = 3, prior_pairs: float = 1.0):
        if not prior_latency >= 0 or not math.isfinite(prior_latency):
            raise ValueError(f"prior_latency={prior_latency} must be a finite number >= 0 (completion-equivalents)")
        if window < 2 or min_pairs < 1 or prior_pairs < 0:
            raise ValueError("need window >= 2, min_pairs >= 1 and prior_pairs >= 0")
        self.prior_latency = float(prior_latency)
        self.min_pairs = min_pairs
        self.prior_pairs = prior_pairs
        self.rounds: deque[tuple[int, float]] = deque(maxlen=window)

    def observe(self, completions: int, seconds: float) -> None:
        """One measured round: how many completions each process generated, and how long the round took."""
        if completions > 0 and math.isfinite(seconds) and seconds >= 0:
            self.rounds.append((int(completions), float(seconds)))

    def _fit(self) -> tuple[float, float, int] | None:
        """(fixed seconds, seconds per completion, pairs of different sizes), or None without two sizes."""
        if len(self.rounds) < 2:
            return None
        sizes = np.array([n for n, _ in self.rounds], dtype=float)
        seconds = np.array([t for _, t in self.rounds], dtype=float)
        i, j = np.triu_indices(len(sizes), k=1)
        apart = sizes[i] != sizes[j]
        if not apart.any():
            return None
        slope = float(np.median((seconds[j] - seconds[i])[apart] / (sizes[j] - sizes[i])[apart]))
        if not slope > 0:  # noise larger than the size effect: no usable per-completion cost
            return None
        fixed = max(float(np.median(seconds - slope * sizes)), 0.0)
        return fixed, slope, int(apart.sum())

    def latency(self) -> float:
        """Fixed latency in completion-equivalents: the prior until the rounds tell it apart from the slope."""
        fit = self._fit()
        if fit is None or fit[2] < self.min_pairs:
            return self.prior_latency
        fixed, slope, pairs = fit
        weight = self.prior_pairs / (self.prior_pairs + pairs)
        return weight * self.prior_latency + (1 - weight) * fixed / slope

    def seconds_per_completion(self) -> float:
        """Seconds one completion costs (the fit's slope; without a fit, the mean round at the current latency)."""
        fit = self._fit()
        if fit is not None:
            return fit[1]
        if not self.rounds:
            return math.nan
        return float(np.mean([t / (n + self.latency()) for n, t in self.rounds]))

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": [list(r) for r in self.rounds]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds.clear()
        for completions, seconds in state.get("rounds", []):
            self.observe(int(completions), float(seconds))


# --- the expected cost of finishing a step --------------------------------------------------------------------------


def survival(pmf: np.ndarray, limit: int) -> np.ndarray:
    """``S[t] = P(Y >= t)`` for ``t = 0..limit`` from a pmf of ``Y`` (entries past ``limit`` add to ``S[limit]``)."""
    pmf = np.asarray(pmf, dtype=float)
    tail = np.cumsum(pmf[::-1])[::-1]  # tail[t] = P(Y >= t) for t < len(pmf)
    out = np.zeros(limit + 1)
    out[: min(len(tail), limit + 1)] = tail[: limit + 1]
    return np.minimum(out, 1.0)


def expected_next_values(values: np.ndarray, survivals: np.ndarray, processes: int) -> np.ndarray:
    """``E[values[m']]`` for every current shortfall ``m`` (rows of ``survivals`` are round sizes).

    Every one of ``processes`` processes misses ``m`` groups and draws its informative count ``Y`` independently
    with ``P(Y >= t) = survivals[n, t]``; the step's next shortfall is the largest one left,
    ``m' = max_p (m - Y_p)^+``, so ``P(m' <= j) = P(Y >= m - j) ** processes``. Returns shape ``(sizes, len(values))``.

    Example:
        >>> s = survival(np.array([0.5, 0.5]), 1)  # one group, informative with chance 1/2
        >>> expected_next_values(np.array([0.0, 10.0]), s[None, :], processes=1).round(2).tolist()
        [[0.0, 5.0]]
    """
    limit = len(values) - 1
    if processes == 1:  # m' = (m - Y)^+: E = sum_{y<m} P(Y = y) values[m - y] + P(Y >= m) values[0]
        pmf = survivals - np.append(survivals[:, 1:], np.zeros((len(survivals), 1)), axis=1)
        shift = np.arange(limit + 1)[None, :] - np.arange(limit + 1)[:, None]  # [y, m] -> m - y
        toeplitz = np.where(shift > 0, values[np.clip(shift, 0, None)], 0.0)
        return pmf @ toeplitz + survivals * values[0]
    m = np.arange(limit + 1)[:, None]
    j = np.arange(limit + 1)[None, :]
    gap = np.clip(m - j, 0, None)  # P(m' <= j) = S[m - j]^P, and 1 once j >= m
    cdf = survivals[:, gap] ** processes  # (sizes, m, j)
    pmf = np.diff(cdf, axis=2, prepend=0.0)
    return pmf @ values


def fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.convolve(a, b)`` for non-negative ``a``, ``b`` (pmfs, costs) in O(L log L) by a real FFT.

    The FFT's rounding error is absolute (about 1e-16 times ``sum(a) * max(b)`` per entry), so tiny negative
    results are clipped to 0: every caller convolves non-negative arrays.

    Example:
        >>> fft_convolve(np.array([0.5, 0.5]), np.array([1.0, 2.0, 3.0])).round(12).tolist()
        [0.5, 1.5, 2.5, 1.5]
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    length = len(a) + len(b) - 1
    size = 1 << max(length - 1, 0).bit_length()  # a power of two: numpy's FFT is fastest there
    out = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:length]
    return np.maximum(out, 0.0)


def _rows(mask: np.ndarray) -> slice | np.ndarray:
    """The rows a mask selects: a slice where they are contiguous (a view, no copy), else their indices."""
    rows = np.flatnonzero(mask)
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


SHORT_PMF = 24  # next_values_operator: pmfs of at most this many entries by a matrix product, not an FFT


def next_values_operator(survivals: np.ndarray, processes: int) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`expected_next_values` as a function of ``values`` for fixed ``survivals``, in O(L log L) per size.

    The step's next shortfall is ``m' = max_p (m - Y_p)^+ = (m - Z)^+`` with ``Z = min_p Y_p``, and
    ``P(Z >= t) = P(Y >= t) ** processes``: the processes collapse into one count ``Z``, and
    ``E[values[m']] = sum_{z < m} P(Z = z) values[m - z] + P(Z >= m) values[0]`` is a convolution of ``Z``'s pmf
    with ``values`` (``values[0]`` left out, it enters through the tail). The transforms of the pmfs are taken once,
    so each of the Bellman recursion's rounds costs one FFT of ``values`` and one inverse per size.

    Example:
        >>> s = survival(np.array([0.5, 0.5]), 1)
        >>> next_values_operator(s[None, :], processes=1)(np.array([0.0, 10.0])).round(12).tolist()
        [[0.0, 5.0]]
    """
    survivals = np.asarray(survivals, dtype=float)
    limit = survivals.shape[1] - 1
    tails = survivals**processes  # P(Z >= t)
    # P(Z = z) for z < limit; P(Z >= limit) only ever meets values[0], through the tail term.
    pmf = tails[:, :limit] - tails[:, 1:]
    # Rounds of a few groups have a pmf that ends early (exact zeros past their size): their convolution is a
    # small matrix product with shifted copies of ``values``, cheaper than an FFT of twice the shortfall.
    nonzero = pmf != 0
    widths = (
        np.where(nonzero.any(axis=1), limit - np.argmax(nonzero[:, ::-1], axis=1), 0) if limit else 0 * tails[:, 0]
    )
    short = widths <= SHORT_PMF
    width = int(widths[short].max(initial=0))
    reversed_short = pmf[short, :width][:, ::-1]
    size = 1 << max(2 * limit - 1, 0).bit_length()  # >= 2 * limit: no wrap-around into m <= limit
    transforms = np.fft.rfft(pmf[~short], size, axis=1)

    long_rows, short_rows = _rows(~short), _rows(short)

    def apply(values: np.ndarray) -> np.ndarray:
        inner = np.array(values, dtype=float)
        inner[0] = 0.0
        out = np.empty_like(tails)  # every row is written below: the long ones, then the short ones
        if len(transforms):
            spread = np.fft.irfft(transforms * np.fft.rfft(inner, size)[None, :], size, axis=1)
            out[long_rows] = spread[:, : limit + 1]
        if width:  # shifted[i, m] = inner[m - (width - 1 - i)], 0 before the start
            shifted = np.lib.stride_tricks.sliding_window_view(np.concatenate((np.zeros(width - 1), inner)), limit + 1)
            out[short_rows] = reversed_short @ shifted
        else:  # short rows without a nonzero entry (rounds of 0 groups)
            out[short_rows] = 0.0
        if values[0] != 0:  # values[0] is 0 for every recursion round past the first
            out += tails * values[0]
        return out

    return apply


@dataclass(frozen=True)
class Costs:
    """A step's cost parameters, all in completion-equivalents."""

    latency: float  # fixed cost of one round
    generations: int  # G: completions per group
    group_value: float  # cost of a missing group when the rounds run out (bought again in a later step)
    exhaustion_penalty: float  # extra cost when a step ends short (the run stops with on_exhausted="error")


def plan_values(
    costs: Costs,
    future_survivals: np.ndarray,
    future_sizes: Sequence[int],
    rounds: int,
    processes: int,
    method: str = "direct",
) -> np.ndarray:
    """``V[k, m]``: least expected cost to finish a step with ``m`` groups missing and ``k`` rounds still allowed.

    Dynamic programming over rounds (Bellman): with no round left a shortfall costs
    ``group_value * m + exhaustion_penalty``; with ``k`` left the cheapest round size ``n`` (from ``future_sizes``,
    survivals as in :func:`expected_next_values`) pays ``latency + G * n`` plus the expected cost of what is left.
    ``method="fft"`` takes the expectations by :func:`next_values_operator` (O(sizes * L log L) per round instead of
    O(sizes * L^2), equal up to rounding); ``"direct"`` is the matrix form.

    Example:
        >>> costs = Costs(latency=0.0, generations=1, group_value=100.0, exhaustion_penalty=0.0)
        >>> sure = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # n = 1 or 2 groups, always informative
        >>> plan_values(costs, sure, [1, 2], rounds=2, processes=1)[2].tolist()  # m = 2: one round of 2, cost 2
        [0.0, 1.0, 2.0]
    """
    limit = future_survivals.shape[1] - 1
    shortfall = np.arange(limit + 1, dtype=float)
    values = np.empty((rounds + 1, limit + 1))
    values[0] = costs.group_value * shortfall + costs.exhaustion_penalty * (shortfall > 0)
    if method not in ("direct", "fft"):
        raise ValueError(f"method={method!r} must be 'direct' or 'fft'")
    round_costs = costs.latency + costs.generations * np.asarray(future_sizes, dtype=float)[:, None]
    if method == "fft" and len(future_sizes):
        operator = next_values_operator(future_survivals, processes)
    else:
        operator = functools.partial(_direct_next_values, survivals=future_survivals, processes=processes)
    for k in range(1, rounds + 1):
        if len(future_sizes) == 0:
            values[k] = values[k - 1]
            continue
        candidates = operator(values[k - 1])  # a fresh array: the round's costs are added in place
        candidates += round_costs
        values[k] = np.minimum(candidates.min(axis=0), values[k - 1])  # stopping early is never cheaper, but safe
        values[k, 0] = 0.0
    return values


def _direct_next_values(values: np.ndarray, survivals: np.ndarray, processes: int) -> np.ndarray:
    return expected_next_values(values, survivals, processes)


def least_cost_between(
    costs: Callable[[list[int]], Sequence[float]],
    low: int,
    high: int,
    slope: float,
    scores: dict[int, float],
    tolerance: float,
) -> None:
    """Score (into ``scores``) enough integers strictly between ``low`` and ``high`` to come within ``tolerance``
    of their least cost; ``costs`` scores a list of sizes at once.

    The cost is ``cost(n) = slope * n + f(n)`` with ``f`` non-increasing (more groups can only lower the expected
    cost of what is left); ``low`` and ``high`` are scored already. For every ``n`` in ``(a, b)`` then
    ``cost(n) >= slope * (a + 1) + f(b) = cost(b) - slope * (b - a - 1)``: an interval whose bound is above the best
    score so far less ``tolerance`` holds nothing cheaper by more than ``tolerance`` and is not scored; the others
    are split at their middle, all middles of one level scored in one call (the caller vectorises). Afterwards
    ``min(scores.values())`` is at most the least cost over ``[low, high]`` plus ``tolerance`` (a negative
    tolerance, the rounding of ``f``, makes it the least).

    Example:
        >>> scores = {0: 10.0, 100: 100.0}
        >>> least_cost_between(lambda ns: [n + max(10 - n, 0) for n in ns], 0, 100, 1.0, scores, tolerance=0.0)
        >>> min(scores.values()), len(scores) < 20
        (10.0, True)
    """
    level = [(low, high)]
    while level:
        best = min(scores.values())
        level = [(a, b) for a, b in level if b - a >= 2 and scores[b] - slope * (b - a - 1) <= best - tolerance]
        middles = sorted({(a + b) // 2 for a, b in level} - set(scores))
        scores.update(zip(middles, costs(middles)))
        level = [half for a, b in level for half in ((a, (a + b) // 2), ((a + b) // 2, b))]


def size_grid(upper: int, lower: int = 1, dense: int = 64, steps: int = 48) -> list[int]:
    """Candidate round sizes in ``[lower, upper]``: every size up to ``dense``, then geometric steps.

    Example:
        >>> size_grid(10)
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        >>> size_grid(1000, dense=4, steps=4)
        [1, 2, 3, 4, 25, 159, 1000]
    """
    if upper < lower:
        return []
    sizes = set(range(lower, min(upper, dense) + 1))
    if upper > dense:
        start = max(dense, lower)
        sizes.update(int(round(v)) for v in np.geomspace(start, upper, steps))
    return sorted(s for s in sizes if lower <= s <= upper)
