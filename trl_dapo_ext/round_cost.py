"""What a dynamic-sampling round costs, and the cheapest way to finish a step: pure functions, no torch.

A generation round costs a fixed latency plus a cost per completion:

    seconds(round) = fixed_seconds + seconds_per_completion * completions

The fixed part is what a round pays however small it is: the generation call waits for its longest completion,
vLLM syncs weights and schedules, reward workers start. Only the ratio matters for sizing, so the planner works in
**completion-equivalents**: ``latency = fixed_seconds / seconds_per_completion``, and a round of ``n`` groups of ``G``
completions costs ``latency + G * n``. veRL's fixed 3x batch is right when the latency dominates; one-by-one
replacement (OpenRLHF) is right when it is zero. :func:`plan_values` finds the sizes in between that minimise the
expected cost of completing the batch, and :class:`RoundCostModel` measures the latency in the run itself.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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
) -> np.ndarray:
    """``V[k, m]``: least expected cost to finish a step with ``m`` groups missing and ``k`` rounds still allowed.

    Dynamic programming over rounds (Bellman): with no round left a shortfall costs
    ``group_value * m + exhaustion_penalty``; with ``k`` left the cheapest round size ``n`` (from ``future_sizes``,
    survivals as in :func:`expected_next_values`) pays ``latency + G * n`` plus the expected cost of what is left.

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
    round_costs = costs.latency + costs.generations * np.asarray(future_sizes, dtype=float)[:, None]
    for k in range(1, rounds + 1):
        if len(future_sizes) == 0:
            values[k] = values[k - 1]
            continue
        candidates = round_costs + expected_next_values(values[k - 1], future_survivals, processes)
        values[k] = np.minimum(candidates.min(axis=0), values[k - 1])  # stopping early is never cheaper, but safe
        values[k, 0] = 0.0
    return values


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
