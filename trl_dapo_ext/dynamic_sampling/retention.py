"""Retention estimates and the laws of informative counts: Beta posteriors with forgetting, Beta-Binomial rows.

A round's informative count per stratum is Beta-Binomial: ``Binomial(n, r)`` with the retention rate ``r`` drawn from
the stratum's Beta posterior. The planner needs its law three ways: whole (:func:`beta_binomial_pmf`, the fill-chance
rule), truncated at a shortfall for many round sizes (:func:`beta_binomial_head`, the direct search), and for long
rows at large batches from shared tables (:func:`beta_binomial_rows`, :func:`beta_binomial_band`, the fast search).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class RetentionEstimate:
    """Beta posterior over a retention rate: ``Beta(prior + informative, prior + zero-variance)``, with forgetting.

    ``informative`` / ``uninformative`` are decayed counts of earlier steps; the prior is never decayed, so the
    posterior stays proper (both parameters > 0) however long the run and whatever the rate.

    Example:
        >>> estimate = RetentionEstimate(prior_mean=0.5, prior_strength=2.0)
        >>> estimate.fold(attempted=10, informative=8, decay=1.0)
        >>> round(estimate.mean(), 3)
        0.75
    """

    prior_mean: float = 0.5
    prior_strength: float = 2.0
    informative: float = 0.0
    uninformative: float = 0.0

    def alpha_beta(self, attempted: int = 0, informative: int = 0) -> tuple[float, float]:
        """Posterior parameters, optionally with this step's not yet folded counts added at full weight."""
        alpha = self.prior_mean * self.prior_strength + self.informative + informative
        beta = (1.0 - self.prior_mean) * self.prior_strength + self.uninformative + (attempted - informative)
        return alpha, beta

    def mean(self, attempted: int = 0, informative: int = 0) -> float:
        alpha, beta = self.alpha_beta(attempted, informative)
        return alpha / (alpha + beta)

    def fold(self, attempted: int, informative: int, decay: float) -> None:
        """End of a step: older evidence keeps weight ``decay``, this step's counts enter at weight 1."""
        self.informative = decay * self.informative + informative
        self.uninformative = decay * self.uninformative + (attempted - informative)


@functools.lru_cache(maxsize=4096)
def _beta_binomial_pmf(trials: int, alpha: float, beta: float) -> np.ndarray:
    pmf = np.asarray(beta_binomial_pmf(trials, alpha, beta))
    pmf.flags.writeable = False  # shared by the cache
    return pmf


@functools.lru_cache(maxsize=4096)
def cached_beta_binomial_head(trials: int, alpha: float, beta: float, limit: int) -> np.ndarray:
    head = beta_binomial_head([trials], alpha, beta, limit)[0]
    head.flags.writeable = False  # shared by the cache
    return head


def beta_binomial_pmf(trials: int, alpha: float, beta: float) -> list[float]:
    """``P(Y = y)`` for ``y = 0..trials`` when ``Y ~ Binomial(trials, r)`` and ``r ~ Beta(alpha, beta)``.

    Example:
        >>> [round(p, 3) for p in beta_binomial_pmf(2, 1.0, 1.0)]  # a uniform rate: every count equally likely
        [0.333, 0.333, 0.333]
    """
    if trials < 0 or alpha <= 0 or beta <= 0:
        raise ValueError(f"need trials >= 0 and alpha, beta > 0, got {trials}, {alpha}, {beta}")
    # log P(0) = log B(alpha, trials + beta) - log B(alpha, beta); then the ratio of consecutive terms,
    # P(y + 1) / P(y) = (trials - y) (y + alpha) / ((y + 1) (trials - y - 1 + beta)), summed in log space.
    log_first = math.lgamma(alpha + beta) + math.lgamma(trials + beta) - math.lgamma(beta)
    log_first -= math.lgamma(alpha + beta + trials)
    y = np.arange(trials, dtype=float)
    log_ratio = np.log(trials - y) + np.log(y + alpha) - np.log(y + 1) - np.log(trials - y - 1 + beta)
    log_pmf = log_first + np.concatenate(([0.0], np.cumsum(log_ratio)))
    pmf = np.exp(log_pmf - log_pmf.max())
    return (pmf / pmf.sum()).tolist()  # renormalised: tail sums stay within [0, 1]


def beta_binomial_head(trials: Sequence[int], alpha: float, beta: float, limit: int) -> np.ndarray:
    """``P(Y = y)`` for ``y < limit`` and ``P(Y >= limit)`` last, one row per entry of ``trials`` (Beta-Binomial).

    The same law as :func:`beta_binomial_pmf`, truncated at ``limit`` and vectorised over many round sizes: the
    planner only needs to know whether a round brings 0, 1, ... or at least ``limit`` informative groups.

    Example:
        >>> beta_binomial_head([2, 3], 1.0, 1.0, limit=2).round(3).tolist()  # uniform rate: 1/(n+1) per count
        [[0.333, 0.333, 0.333], [0.25, 0.25, 0.5]]
    """
    if alpha <= 0 or beta <= 0 or limit < 0:
        raise ValueError(f"need alpha, beta > 0 and limit >= 0, got {alpha}, {beta}, {limit}")
    counts = np.asarray(trials, dtype=int)
    if len(counts) == 0:
        return np.zeros((0, limit + 1))
    n = counts.astype(float)[:, None]
    # log P(0) = [lgamma(b + n) - lgamma(b)] - [lgamma(a + b + n) - lgamma(a + b)]: for every n at once from one
    # running sum, since lgamma(x + k + 1) = lgamma(x + k) + log(x + k).
    k = np.arange(counts.max(), dtype=float)
    running = np.concatenate(([0.0], np.cumsum(np.log(k + beta) - np.log(k + alpha + beta))))
    log_first = running[counts][:, None]
    y = np.arange(limit, dtype=float)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):  # terms past n are impossible: log 0 = -inf
        log_ratio = np.log(np.clip(n - y, 0, None)) + np.log(y + alpha) - np.log(y + 1) - np.log(n - y - 1 + beta)
    log_ratio = np.where(n - y > 0, log_ratio, -np.inf)
    head = np.exp(log_first + np.concatenate((np.zeros_like(n), np.cumsum(log_ratio, axis=1)), axis=1))
    head[:, limit] = np.clip(1.0 - head[:, :limit].sum(axis=1), 0.0, 1.0)  # P(Y >= limit)
    return head


def beta_binomial_log_pmf(
    top: int, alpha: float, beta: float, limit: int
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``log P(Y_n = y)`` for arrays ``n <= top`` and ``y <= limit`` (broadcast; ``-inf`` past ``n``), from tables.

    ``log P(Y_n = y) = log P(Y_n = 0) + R[y] + F[n] - F[n - y]`` with the running sums
    ``R[y] = sum_{i<y} log((i + alpha) / (i + 1))`` and ``F[k] = sum_{j<=k} log(j / (j - 1 + beta))``: the ratio of
    consecutive terms splits into a part in ``y`` and a part in ``n - y``. The tables cost O(top + limit)
    logarithms once; each entry is then three look-ups (the direct form takes four logarithms per entry).

    Example:
        >>> log_pmf = beta_binomial_log_pmf(3, 1.0, 1.0, limit=3)
        >>> np.exp(log_pmf(np.array([3]), np.arange(4))).round(3).tolist()  # uniform rate: 1/4 per count
        [0.25, 0.25, 0.25, 0.25]
    """
    if alpha <= 0 or beta <= 0 or limit < 0:
        raise ValueError(f"need alpha, beta > 0 and limit >= 0, got {alpha}, {beta}, {limit}")
    k = np.arange(top, dtype=float)
    first = np.concatenate(([0.0], np.cumsum(np.log(k + beta) - np.log(k + alpha + beta))))  # log P(Y_n = 0)
    falling = np.concatenate(([0.0], np.cumsum(np.log(k + 1) - np.log(k + beta))))
    y = np.arange(limit, dtype=float)
    rising = np.concatenate(([0.0], np.cumsum(np.log(y + alpha) - np.log(y + 1))))
    offset = first + falling

    def log_pmf(n: np.ndarray, y: np.ndarray) -> np.ndarray:
        gap = n - y  # counts past n are impossible
        logs = offset[n] + rising[y] - falling[np.clip(gap, 0, None)]
        return np.where(gap >= 0, logs, -np.inf)

    return log_pmf


def _exp(logs: np.ndarray) -> np.ndarray:
    """``exp(logs)``, entries below ``e^-700`` (1e-304) as 0: ``exp`` is ~40x slower where its result is subnormal,
    and most entries of long Beta-Binomial rows are; any sum of them moves by less than 1e-300."""
    return np.where(logs > -700.0, np.exp(np.maximum(logs, -700.0)), 0.0)


def beta_binomial_rows(trials: Sequence[int], alpha: float, beta: float, limit: int) -> np.ndarray:
    """:func:`beta_binomial_head` from :func:`beta_binomial_log_pmf`'s tables, for many long rows at once.

    Equal to :func:`beta_binomial_head` up to rounding: entries agree within 1e-10 at thousands of trials (the
    running sums round differently). The fast search uses it, the direct one keeps :func:`beta_binomial_head`.

    Example:
        >>> beta_binomial_rows([2, 3], 1.0, 1.0, limit=2).round(3).tolist()  # uniform rate: 1/(n+1) per count
        [[0.333, 0.333, 0.333], [0.25, 0.25, 0.5]]
    """
    counts = np.asarray(trials, dtype=int)
    log_pmf = beta_binomial_log_pmf(int(counts.max(initial=0)), alpha, beta, limit)
    head = np.empty((len(counts), limit + 1))
    head[:, :limit] = _exp(log_pmf(counts[:, None], np.arange(limit)[None, :]))
    head[:, limit] = np.clip(1.0 - head[:, :limit].sum(axis=1), 0.0, 1.0)  # P(Y >= limit)
    return head


BAND_TAIL = 1e-18  # beta_binomial_band: the most probability a row may leave outside its band


def beta_binomial_band(
    trials: Sequence[int], alpha: float, beta: float, limit: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of :func:`beta_binomial_rows` below ``limit`` where they hold their mass: ``(starts, band)`` with
    ``band[i, j] = P(Y_n = starts[i] + j)``, one common width; ``None`` where no band is certified.

    A band spans 10 standard deviations of the largest row each side of a row's mean. What it leaves out is bounded,
    not assumed: with ``alpha, beta >= 1`` the law is log-concave (the ratio ``P(y + 1) / P(y)`` falls with ``y``), so
    past the band's last entry the terms fall at least geometrically at that entry's ratio, and before its first
    entry likewise; the band is returned only when these bounds leave out at most ``BAND_TAIL`` per row (far below
    the rounding of the sums it enters).

    Example:
        >>> starts, band = beta_binomial_band([4000], 5000.0, 5000.0, limit=3000)
        >>> int(starts[0]) < 2000 < int(starts[0]) + band.shape[1], bool(abs(band.sum() - 1) < 1e-9)
        (True, True)
    """
    counts = np.asarray(trials, dtype=int)
    if alpha < 1 or beta < 1 or len(counts) == 0 or limit < 1:
        return None
    n = counts.astype(float)
    total = alpha + beta
    spread = np.sqrt(n * alpha * beta * (total + n) / (total**2 * (total + 1)))
    width = min(2 * math.ceil(10 * float(spread.max())) + 4, limit)
    if 4 * width > 3 * limit:  # hardly cheaper than the whole rows
        return None
    starts = np.clip(np.round(n * alpha / total).astype(int) - width // 2, 0, limit - width)
    log_pmf = beta_binomial_log_pmf(int(counts.max()), alpha, beta, limit)
    band = _exp(log_pmf(counts[:, None], starts[:, None] + np.arange(width)[None, :]))

    def ratio(y: np.ndarray) -> np.ndarray:  # P(y + 1) / P(y) for 0 <= y < n
        return (n - y) * (y + alpha) / ((y + 1) * (n - y - 1 + beta))

    low, high = starts - 1, starts + width  # the first terms left out below and above
    inside = (high < limit) & (high <= n)  # terms above the band that count (the rest is P(Y >= limit))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rising, falling = ratio(low), ratio(high)
        below = np.exp(log_pmf(counts, np.maximum(low, 0))) / (1 - 1 / rising)
        above = np.exp(log_pmf(counts, np.minimum(high, limit))) / (1 - falling)
        # a ratio on the wrong side of 1 (the band misses the mode) leaves the bound void: not certified
        certified = (low < 0) | ((rising > 1) & (below <= BAND_TAIL))
        certified &= ~inside | ((falling < 1) & (above <= BAND_TAIL))
    return (starts, band) if bool(certified.all()) else None


def at_least_probability(needed: int, sources: list[tuple[int, float, float]]) -> float:
    """``P(Y_1 + ... + Y_k >= needed)`` for independent Beta-Binomial ``Y_i`` given as ``(trials, alpha, beta)``.

    Example:
        >>> round(at_least_probability(1, [(1, 1.0, 1.0), (1, 1.0, 1.0)]), 3)  # 1 - P(both 0) = 1 - 1/2 * 1/2
        0.75
    """
    if needed <= 0:
        return 1.0
    sources = sorted((source for source in sources if source[0] > 0), key=lambda source: source[0])
    if not sources:
        return 0.0
    distribution = np.ones(1)  # pmf of the sum of all sources but the largest
    for trials, alpha, beta in sources[:-1]:
        distribution = np.convolve(distribution, _beta_binomial_pmf(trials, alpha, beta))
    # The largest source only through its tail: O(len) instead of a full convolution.
    last = np.asarray(_beta_binomial_pmf(*sources[-1]))
    tail = np.append(np.cumsum(last[::-1])[::-1], 0.0)  # tail[k] = P(largest >= k)
    shortfall = np.clip(needed - np.arange(len(distribution)), 0, len(last))
    return float(min(1.0, np.dot(distribution, tail[shortfall])))
