"""How many prompt groups each dynamic-sampling round should generate: the cheapest plan to fill the batch.

Dynamic sampling keeps only *informative* groups (the task reward varies). A round that asks for too few prompts
needs another round (another generation call, with its fixed cost and long tail); one that asks for too many
generates surplus informative groups that are thrown away. :class:`RefillPlanner` sizes each round from running
estimates of the retention rate (informative groups / attempted groups):

* Each estimate is a Beta posterior: a weak prior plus the counts of earlier steps, each step down-weighted by
  ``decay`` so that the estimate follows a policy that is learning (retention drifts).
* Prompts can be split into **strata** that the caller names, e.g. by what a prompt's last group turned out to be
  (:meth:`trl_dapo_ext.dynamic_sampling.history.PromptHistory.stratum`): a prompt that was informative last time is
  far more likely to be informative again than one that was all right. Each stratum has its own estimate (its prior is the pooled
  rate), and a round's informative count is a sum of one Beta-Binomial per stratum (without history: one stratum).
* By default (``confidence=None``) a round is sized to minimise the expected cost of finishing the step, where a
  round costs ``round_latency + G * groups`` completion-equivalents (:func:`plan_values`: a Bellman
  recursion over the rounds left, with a large penalty for a step that ends short). The latency is set, or measured
  in the run (``measure_latency``). The chance that round 1 fills the batch is then an outcome of the costs, not a
  knob: high when rounds are slow, low when they are cheap.
* With a number for ``confidence`` the older rule applies: the smallest round whose chance of filling the batch on
  every process is at least ``confidence`` (the product of the processes' chances).
* A retention rate of 0 never divides by zero: the cost rule sends the largest rounds while the batch can still be
  filled and stops (exhausted) once it cannot; the confidence rule asks for the largest round allowed.
* Rounds are capped (``max_oversample`` times the batch's groups: the memory of one generation call) and so is the
  whole step (``max_groups_per_step``): the planner never asks for more than what is left of the budget.

Everything is plain arithmetic on counts and strata that every process agrees on (gathered counts, the shared refill
stream), so every process computes the same plan. No torch (numpy for the convolutions).

What a round costs, and the cheapest way to finish a step (the round-cost model below, pure functions):

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

import functools
import math
from collections import Counter, deque
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
    widths = np.where(nonzero.any(axis=1), limit - np.argmax(nonzero[:, ::-1], axis=1), 0)
    short = widths <= SHORT_PMF
    width = int(widths[short].max(initial=0))
    reversed_short = pmf[short, :width][:, ::-1]
    size = 1 << max(2 * limit - 1, 0).bit_length()  # >= 2 * limit: no wrap-around into m <= limit
    transforms = np.fft.rfft(pmf[~short], size, axis=1)

    def apply(values: np.ndarray) -> np.ndarray:
        inner = np.array(values, dtype=float)
        inner[0] = 0.0
        out = tails * values[0]
        if len(transforms):
            spread = np.fft.irfft(transforms * np.fft.rfft(inner, size)[None, :], size, axis=1)
            out[~short] += spread[:, : limit + 1]
        if width:  # shifted[i, m] = inner[m - (width - 1 - i)], 0 before the start
            shifted = np.lib.stride_tricks.sliding_window_view(np.concatenate((np.zeros(width - 1), inner)), limit + 1)
            out[short] += reversed_short @ shifted
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
        candidates = round_costs + operator(values[k - 1])
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


# ------------------------------------------------------------------------------------ the fixed-factor rule


def fixed_first_refill(target_groups: int, oversample: float, max_groups_per_step: int | None = None) -> int:
    """Refill groups (per process) that a fixed-factor first round adds to the batch's own ``target_groups``.

    ``ceil(target_groups * oversample) - target_groups`` (DAPO's recipe generates 3x the batch), but never past the
    per-step budget ``max_groups_per_step`` (the batch's own groups included; None: no budget).

    Example (a batch of 8 groups, 3x; then a budget of 12 groups per step):
        >>> fixed_first_refill(8, 3.0), fixed_first_refill(8, 3.0, max_groups_per_step=12)
        (16, 4)
    """
    refill = math.ceil(target_groups * oversample) - target_groups
    if max_groups_per_step is not None:
        refill = min(refill, max(max_groups_per_step - target_groups, 0))
    return max(refill, 0)


def plan_refill_groups(
    missing_groups: int,
    attempted_groups: int,
    informative_groups_seen: int,
    max_groups: int,
    budget_left: int | None = None,
) -> int:
    """How many prompt groups (per process) the next refill round should generate (the fixed-factor rule).

    Asks for ``missing / observed retention`` groups so that one more round usually suffices, at least 1 and at most
    ``max_groups`` (the size of the first round) and ``budget_left`` (the groups the step may still generate under
    ``max_groups_per_step``; None: no budget). Before any informative group was seen, asks for the most allowed.
    Returns 0 when nothing is missing or the budget is spent: the step stops. Every process must get the same
    answer, so call it with globally agreed counts.

    Example:
        >>> plan_refill_groups(missing_groups=3, attempted_groups=8, informative_groups_seen=4, max_groups=8)
        6
        >>> plan_refill_groups(missing_groups=3, attempted_groups=8, informative_groups_seen=4, max_groups=8,
        ...                    budget_left=2)
        2
    """
    if missing_groups <= 0:
        return 0
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    if budget_left is not None:
        if budget_left <= 0:
            return 0
        max_groups = min(max_groups, budget_left)
    if attempted_groups <= 0 or informative_groups_seen <= 0:
        return max_groups
    retention = informative_groups_seen / attempted_groups
    return max(1, min(max_groups, math.ceil(missing_groups / retention)))


# --------------------------------------------------------------------------------------------- the planner

POOLED = "all"  # the stratum of prompts the caller does not stratify
REFILL = "\x00refill"  # the cost search's one stratum for refill groups (no caller names a stratum so)
EXACT_UP_TO = 128  # direct search up to this shortfall and 4x it per round (RefillPlanner.exact_up_to)
PLAN_TOLERANCE = 0.002  # above EXACT_UP_TO: the plan's expected cost is within this fraction of the best size's
DEFAULT_ROUNDS = 10  # rounds a step may take when the caller does not say (dynamic_sampling_max_rounds default)


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
def _beta_binomial_head(trials: int, alpha: float, beta: float, limit: int) -> np.ndarray:
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

    Equal to :func:`beta_binomial_head` up to rounding (about 1e-13 absolute); the fast search uses it, the direct
    one keeps :func:`beta_binomial_head`.

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


# --- scoring many round sizes at once (the planner's fast search) ---------------------------------------------------

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
        head = _beta_binomial_head(trials, *posteriors[stratum], limit)
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


Strata = Sequence[str]  # one stratum name per prompt group
Candidates = Callable[[int], Strata]  # strata of the next n global refill prompts, in stream order (a peek)


class RefillPlanner:
    """Sizes dynamic-sampling rounds at the least expected cost of filling the batch, within a hard budget.

    All group counts passed in and returned are **per process** except those given to :meth:`observe`, which are
    **global** (summed over processes: retention is a ratio, and global counts are what the trainer gathers anyway).
    Per optimizer batch the trainer calls::

        refill = planner.first_round(target_groups, own=..., candidates=...)  # refill groups added to round 1
        ... generate, filter ...
        planner.observe(attempted, informative, stratum=...)   # per round and stratum, global counts
        refill = planner.next_round(missing_groups, rounds_left, candidates=...)  # while a process misses groups
        ...
        planner.end_step()

    ``own`` (per process, the strata of the batch's own prompt groups) and ``candidates`` (a peek at the strata of
    the refill stream's next prompts) are optional: without them every group is in one pooled stratum. Process ``p``
    receives the ``p``-th contiguous share of each round's global refill slice (``stream.local_share``).

    Example (the cost rule, rounds as costly as 2 groups of G=8, then the older fill-chance rule):
        >>> planner = RefillPlanner(max_oversample=4.0, round_latency=16.0, generations=8)
        >>> for _ in range(20):  # a stable retention rate of 1/2
        ...     refill = planner.first_round(target_groups=32)
        ...     planner.observe(attempted=32 + refill, informative=(32 + refill) // 2)
        ...     planner.end_step()
        >>> planner.first_round(target_groups=32)  # 57 groups: ~28 informative expected, a cheap 2nd round tops up
        25
        >>> planner = RefillPlanner(max_oversample=4.0, confidence=0.95)
        >>> for _ in range(20):
        ...     refill = planner.first_round(target_groups=32)
        ...     planner.observe(attempted=32 + refill, informative=(32 + refill) // 2)
        ...     planner.end_step()
        >>> planner.first_round(target_groups=32)  # 32 / 0.5 = 64 groups plus a 95% margin (82), less the batch's 32
        50
        >>> planner.next_round(missing_groups=3, rounds_left=5)  # after round 1 fell 3 groups short
        11
    """

    def __init__(
        self,
        max_oversample: float = 4.0,
        max_groups_per_step: int | None = None,
        confidence: float | None = None,
        last_round_confidence: float = 0.999,
        decay: float = 0.8,
        prior_retention: float = 0.5,
        prior_strength: float = 2.0,
        num_processes: int = 1,
        generations: int = 8,
        round_latency: float = 16.0,
        measure_latency: bool = False,
        exhaustion_cost_steps: float = 1000.0,
    ):
        if not max_oversample >= 1.0:
            raise ValueError(f"max_oversample={max_oversample} must be >= 1: round 1 holds at least the batch")
        if max_groups_per_step is not None and max_groups_per_step < 1:
            raise ValueError(f"max_groups_per_step={max_groups_per_step} must be >= 1 or None (no step budget)")
        for name, value in (("confidence", confidence), ("last_round_confidence", last_round_confidence)):
            if value is not None and not 0.0 < value < 1.0:
                raise ValueError(f"{name}={value} must lie strictly between 0 and 1")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay={decay} must lie in [0, 1] (1 keeps every step at full weight)")
        if not 0.0 < prior_retention < 1.0 or not prior_strength > 0:
            raise ValueError("prior_retention must lie in (0, 1) and prior_strength must be > 0")
        if num_processes < 1:
            raise ValueError(f"num_processes={num_processes} must be >= 1")
        if generations < 1 or not exhaustion_cost_steps >= 0:
            raise ValueError(
                f"need generations >= 1 and exhaustion_cost_steps >= 0, got {generations}, {exhaustion_cost_steps}"
            )
        self.max_oversample = max_oversample
        self.max_groups_per_step = max_groups_per_step
        self.confidence = confidence
        self.last_round_confidence = last_round_confidence
        self.decay = decay
        self.prior_retention = prior_retention
        self.prior_strength = prior_strength
        self.num_processes = num_processes
        self.generations = generations
        self.round_latency = float(round_latency)
        self.measure_latency = measure_latency
        self.exhaustion_cost_steps = exhaustion_cost_steps
        self.cost_model = RoundCostModel(prior_latency=round_latency)  # validates round_latency
        # Shortfalls up to this many groups are planned by the direct O(L^2)-per-candidate search (exact, and fast
        # there); larger ones by the FFT search (_cheapest_refill_fast). Tests and benchmarks raise it to compare.
        self.exact_up_to = EXACT_UP_TO
        self.estimates: dict[str, RetentionEstimate] = {}  # decayed counts of earlier steps, per stratum
        self.last_step: dict[str, float] = {}  # what the last closed step planned and spent (for logging)
        self._reset_step()

    # --- per step ---------------------------------------------------------------------------------------------------

    def _reset_step(self) -> None:
        self.step_target = 0  # groups per process the batch needs
        self.step_planned = 0  # groups per process generated or planned this step, the batch's own included
        self.step_counts: dict[str, list[int]] = {}  # global [attempted, informative] per stratum, this step
        self.step_rounds = 0  # rounds planned this step
        self.step_expected_cost = math.nan  # completion-equivalents, as planned at round 1
        self.step_fill_chance = math.nan  # chance that round 1 fills the batch, as planned

    def _pooled_mean(self) -> float:
        """Retention over all strata (decayed history plus this step): the prior of every stratum's estimate."""
        alpha, beta = self._pooled_alpha_beta()
        return alpha / (alpha + beta)

    def _posteriors(self, strata: set[str]) -> dict[str, tuple[float, float]]:
        prior = RetentionEstimate(self._pooled_mean(), self.prior_strength)
        posteriors = {}
        for stratum in strata:
            history = self.estimates.get(stratum, RetentionEstimate())
            prior.informative, prior.uninformative = history.informative, history.uninformative
            posteriors[stratum] = prior.alpha_beta(*self.step_counts.get(stratum, (0, 0)))
        return posteriors

    def _wanted(self, rounds_left: int | None) -> float:
        return self.last_round_confidence if rounds_left == 1 else self.confidence

    def _round_cap(self) -> int:
        return math.ceil(self.step_target * self.max_oversample)

    def _fill_chance(
        self,
        needed: Sequence[int],
        own: Sequence[Strata],
        peeked: Strata,
        refill: int,
        posteriors: dict[str, tuple[float, float]],
    ) -> float:
        """Chance that every process reaches its ``needed`` groups when each adds ``refill`` refill groups."""
        shares = [peeked[p * refill : (p + 1) * refill] for p in range(self.num_processes)]
        chance = 1.0
        for p in range(self.num_processes):
            if needed[p] > 0:
                counts = Counter(own[p]) + Counter(shares[p])
                chance *= at_least_probability(needed[p], [(n, *posteriors[s]) for s, n in counts.items()])
        return chance

    def _smallest_refill(
        self, needed: Sequence[int], own: Sequence[Strata], candidates: Candidates | None, upper: int, wanted: float
    ) -> int:
        """Smallest refill count in ``[0, upper]`` whose chance to fill every process reaches ``wanted``.

        Returns ``upper`` when even that falls short. The chance grows with the refill count (more groups can only
        add informative ones), so a bisection finds it.
        """
        if upper <= 0:
            return 0
        peeked = self._peek(candidates, upper)
        posteriors = self._posteriors({s for groups in (*own, peeked) for s in groups})  # fixed during the search

        def chance(refill: int) -> float:
            return self._fill_chance(needed, own, peeked, refill, posteriors)

        if chance(0) >= wanted:
            return 0
        if chance(upper) < wanted:
            return upper
        low, high = 0, upper  # chance(low) < wanted <= chance(high)
        while high - low > 1:
            middle = (low + high) // 2
            if chance(middle) >= wanted:
                high = middle
            else:
                low = middle
        return high

    def _peek(self, candidates: Candidates | None, upper: int) -> list[str]:
        """Strata of the next ``upper`` refill groups of every process (pooled where the stream says nothing)."""
        wanted = upper * self.num_processes
        peeked = list(candidates(wanted)) if candidates is not None and wanted > 0 else []
        return peeked + [POOLED] * (wanted - len(peeked))

    # --- cost-aware sizing (confidence=None) ------------------------------------------------------------------------

    def latency(self) -> float:
        """Fixed cost of one round in completion-equivalents: measured in the run, or the configured value."""
        return self.cost_model.latency() if self.measure_latency else self.round_latency

    def _costs(self) -> Costs:
        latency, G = self.latency(), self.generations
        retention = max(self._pooled_mean(), 1e-6)
        # A group missing when the rounds run out is bought again later, at about the run's cost per retained group.
        group_value = (G + latency / max(self.step_target, 1)) / retention
        return Costs(latency, G, group_value, self.exhaustion_cost_steps * group_value * max(self.step_target, 1))

    def _pooled_alpha_beta(self) -> tuple[float, float]:
        """Posterior over the retention of prompts the planner knows nothing about (future refill rounds)."""
        pooled = RetentionEstimate(self.prior_retention, self.prior_strength)
        for estimate in self.estimates.values():
            pooled.informative += estimate.informative
            pooled.uninformative += estimate.uninformative
        return pooled.alpha_beta(*(sum(counts[i] for counts in self.step_counts.values()) for i in (0, 1)))

    def _future_values(
        self, limit: int, rounds: int, cap: int, refill: tuple[float, float], method: str = "direct"
    ) -> np.ndarray:
        """``V[m]``, the least expected cost to finish from a shortfall ``m`` with ``rounds`` rounds after this one,
        when every later round draws refill groups whose informative chance has the posterior ``refill``."""
        sizes = size_grid(cap, dense=16, steps=24)  # V is smooth in n: a coarse grid beyond 16 groups suffices
        rows = beta_binomial_rows if method == "fft" else beta_binomial_head  # the same law, the fast search's way
        head = rows(sizes, *refill, limit)
        survivals = np.cumsum(head[:, ::-1], axis=1)[:, ::-1]  # P(Y >= t)
        return plan_values(self._costs(), survivals, sizes, rounds, self.num_processes, method=method)[rounds]

    def _refill_posterior(self, peeked: Strata, posteriors: dict[str, tuple[float, float]]) -> tuple[float, float]:
        """One posterior for every refill group: the mean retention of the stream's next prompts, at the pooled
        strength.

        Refill groups are exchangeable on purpose: the stream's order is fixed, so a round that stopped right
        before a run of hopeless prompts would only hand them to the next round. Scoring the stream's prefixes one by
        one would make the cost search chase that order instead of the cost.
        """
        alpha, beta = self._pooled_alpha_beta()
        table = {s: posteriors[s][0] / sum(posteriors[s]) for s in set(peeked)}  # once per stratum, not prompt
        means = np.fromiter(map(table.__getitem__, peeked), float, len(peeked))
        mean = float(np.mean(means)) if len(means) else alpha / (alpha + beta)
        mean = min(max(mean, 1e-9), 1 - 1e-9)
        return mean * (alpha + beta), (1 - mean) * (alpha + beta)

    @staticmethod
    def _count_survival(needed: int, counts: Counter, heads: dict[str, np.ndarray]) -> np.ndarray:
        """``P(Y >= t)`` for ``t = 0..needed``, ``Y`` the informative count of groups in these strata.

        ``heads[stratum][n]``: the truncated law of the informative count of ``n`` groups of that stratum.
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

    def _cheapest_refill(
        self,
        needed: Sequence[int],
        own: Sequence[Strata],
        candidates: Candidates | None,
        lower: int,
        upper: int,
        rounds_left: int | None,
    ) -> int:
        """Refill count in ``[lower, upper]`` with the least expected cost of finishing the step.

        Cost of this round (``latency + G * groups``) plus the expected least cost of what it leaves
        (:func:`plan_values` over the rounds after it). The batch's own groups count by
        their strata; refill groups by the mean of the stream's next prompts (:meth:`_refill_posterior`). Records
        the plan's expected cost and its chance to fill the batch.
        """
        limit = max(needed)
        peeked = self._peek(candidates, upper)
        posteriors = self._posteriors(set(peeked).union(*own))  # set() at C speed: the peek is long
        refill_posterior = self._refill_posterior(peeked, posteriors)
        later_rounds = (rounds_left - 1) if rounds_left is not None else DEFAULT_ROUNDS - 1
        later_cap = self._round_cap()
        if self.max_groups_per_step is not None:  # what the budget leaves after a round of the least useful size
            later_cap = min(later_cap, self.next_budget() - max(lower, min(limit, upper)))
        # The direct search costs O(round cap * L) for its Beta-Binomial rows and O(L^2) per candidate: fast for the
        # shortfalls and rounds of a batch of up to exact_up_to groups (round cap 4x), too slow past them.
        if limit > self.exact_up_to or upper > 4 * self.exact_up_to:  # the same plan, O(L log L) per candidate
            values = self._future_values(limit, max(later_rounds, 0), max(later_cap, 0), refill_posterior, "fft")
            return self._cheapest_refill_fast(needed, own, posteriors, refill_posterior, values, lower, upper)
        values = self._future_values(limit, max(later_rounds, 0), max(later_cap, 0), refill_posterior)
        costs = self._costs()
        most = len(own[0]) + upper  # the most groups of one stratum any candidate puts on a process
        heads = {s: beta_binomial_head(range(most + 1), *ab, limit) for s, ab in posteriors.items()}
        heads[REFILL] = beta_binomial_head(range(upper + 1), *refill_posterior, limit)

        def expected(refill: int) -> tuple[float, float]:
            cdf = np.ones(limit + 1)  # P(m' <= j): every process short by at most j
            for p in range(self.num_processes):
                if needed[p] > 0:
                    counts = Counter(own[p]) + Counter({REFILL: refill})
                    tail = self._count_survival(needed[p], counts, heads)
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
        best = min(scores, key=lambda n: (scores[n][0], n))
        stop = costs.group_value * limit + costs.exhaustion_penalty  # what ending the step short costs now
        if lower >= 1 and scores[best][0] >= stop:  # no round is worth its cost: the step cannot be saved
            self._plan = (stop, 0.0)
            return 0
        self._plan = scores[best]
        return best

    def _cheapest_refill_fast(
        self,
        needed: Sequence[int],
        own: Sequence[Strata],
        posteriors: dict[str, tuple[float, float]],
        refill_posterior: tuple[float, float],
        values: np.ndarray,
        lower: int,
        upper: int,
    ) -> int:
        """:meth:`_cheapest_refill`'s search for large shortfalls, with the same candidates and the same scores.

        The direct search costs O(L^2) per candidate (L = the largest shortfall: every Beta-Binomial row up to the
        round cap, one direct convolution per process and candidate) and scores every size between the coarse grid's
        neighbours of its best point: about O(L^3) per decision. Here:

        * only the Beta-Binomial rows a candidate uses are computed, from shared tables (:func:`beta_binomial_rows`);
        * a process's own groups are convolved with the values once per decision (:func:`fft_convolve`): with one
          process short, a candidate's score is then one dot product with its refill row (:func:`one_short_scorer`,
          O(L)); with several, one FFT convolution per candidate and distinct process (:func:`many_short_scorer`);
        * the refinement scores only the sizes that can still beat the best one (:func:`least_cost_between`: the
          expected cost of what is left falls as the round grows, so a bound rules out whole intervals).

        Scores agree with the direct ones up to rounding (about 1e-12 relative), and the refinement's choice
        costs at most ``PLAN_TOLERANCE`` (0.2%) of the expected cost more than the direct search's choice.
        """
        limit = max(needed)
        costs = self._costs()
        groups: Counter = Counter()
        for p in range(self.num_processes):
            if needed[p] > 0:
                groups[(needed[p], tuple(sorted(Counter(own[p]).items())))] += 1
        owned = {key: own_distribution(*key, posteriors, limit) for key in groups}
        if len(groups) == 1 and sum(groups.values()) == 1:
            (need, _), distribution = next(iter(owned.items()))
            scorer = one_short_scorer(distribution, need, refill_posterior, values)
        else:
            alike = [(key[0], owned[key], count) for key, count in groups.items()]
            scorer = many_short_scorer(alike, limit, refill_posterior, values)
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
        best = min(scores, key=lambda n: (scores[n][0], n))
        stop = costs.group_value * limit + costs.exhaustion_penalty
        if lower >= 1 and scores[best][0] >= stop:
            self._plan = (stop, 0.0)
            return 0
        self._plan = scores[best]
        return best

    def next_budget(self) -> int | None:
        """Groups per process the step may still generate (None: no per-step budget)."""
        if self.max_groups_per_step is None:
            return None
        return max(self.max_groups_per_step - max(self.step_planned, self.step_target), 0)

    def first_round(
        self,
        target_groups: int,
        rounds_left: int | None = None,
        own: Sequence[Strata] | None = None,
        candidates: Candidates | None = None,
    ) -> int:
        """Start a step: how many refill groups (per process) round 1 adds to the batch's own ``target_groups``.

        ``own``: per process, the strata of its ``target_groups`` own groups (default: all pooled). ``candidates``:
        a peek at the refill stream (default: pooled). ``rounds_left`` counts round 1 itself
        (``dynamic_sampling_max_rounds``); with 1 the planner aims at ``last_round_confidence``. Folds a previous
        step that was not closed with :meth:`end_step`.

        Example:
            >>> RefillPlanner(max_oversample=3.0, round_latency=1e4).first_round(8)  # slow rounds: the largest one
            16
            >>> RefillPlanner(max_oversample=3.0, round_latency=0.0).first_round(8)  # free rounds: no extra groups
            0
        """
        if target_groups < 0:
            raise ValueError(f"target_groups={target_groups} must be >= 0")
        if own is None:
            own = [[POOLED] * target_groups] * self.num_processes
        if len(own) != self.num_processes or any(len(groups) != target_groups for groups in own):
            raise ValueError(f"own must hold {self.num_processes} lists of {target_groups} strata (one per group)")
        self.end_step()
        self.step_target = target_groups
        upper = self._round_cap() - target_groups
        if self.max_groups_per_step is not None:
            upper = min(upper, self.max_groups_per_step - target_groups)
        needed = [target_groups] * self.num_processes
        if self.confidence is None:
            refill = self._cheapest_refill(needed, own, candidates, 0, max(upper, 0), rounds_left)
            self.step_expected_cost, self.step_fill_chance = self._plan
        else:
            refill = self._smallest_refill(needed, own, candidates, max(upper, 0), self._wanted(rounds_left))
        self.step_planned = target_groups + refill
        self.step_rounds = 1
        return refill

    def next_round(
        self,
        missing_groups: int | Sequence[int],
        rounds_left: int | None = None,
        candidates: Candidates | None = None,
    ) -> int:
        """Refill groups (per process) for the next round.

        ``missing_groups``: per process (or one number for all, e.g. the maximum). ``rounds_left`` counts the round
        being planned; with 1 the fill-chance rule aims at ``last_round_confidence``. Returns 0 when nothing is
        missing, the step's budget is spent, or (cost-aware) no round is worth its cost because the retention is
        too low to fill the batch in the rounds left: the trainer must then stop (exhausted). Otherwise at least 1
        and never more than the round cap or what is left of ``max_groups_per_step``.

        Example:
            >>> planner = RefillPlanner(max_oversample=3.0, max_groups_per_step=20, round_latency=1e4)
            >>> planner.first_round(8)
            12
            >>> planner.observe(attempted=20, informative=0)
            >>> planner.next_round(missing_groups=8)  # the step's 20 groups are spent: stop (exhausted)
            0
        """
        if isinstance(missing_groups, int):
            missing_groups = [missing_groups] * self.num_processes
        if len(missing_groups) != self.num_processes:
            raise ValueError(f"missing_groups needs one count per process ({self.num_processes})")
        if max(missing_groups) <= 0:
            return 0
        upper = max(self._round_cap(), 1)
        if self.max_groups_per_step is not None:
            upper = min(upper, max(self.max_groups_per_step - self.step_planned, 0))
        if upper <= 0:
            return 0
        empty: list[list[str]] = [[] for _ in range(self.num_processes)]
        if self.confidence is None:  # 0 when no round is worth its cost (hopeless): stop, as when the budget is spent
            refill = self._cheapest_refill(missing_groups, empty, candidates, 1, upper, rounds_left)
        else:
            refill = max(1, self._smallest_refill(missing_groups, empty, candidates, upper, self._wanted(rounds_left)))
        self.step_planned += refill
        self.step_rounds += 1
        return refill

    def observe(self, attempted: int, informative: int, stratum: str = POOLED) -> None:
        """Global counts of one round's groups of one stratum (call once per stratum per round)."""
        if not 0 <= informative <= attempted:
            raise ValueError(f"need 0 <= informative <= attempted, got informative={informative}, {attempted=}")
        counts = self.step_counts.setdefault(str(stratum), [0, 0])
        counts[0] += attempted
        counts[1] += informative

    def observe_groups(self, strata: Strata, informative: Sequence[bool]) -> None:
        """Global outcomes of one round, one per group, each with the stratum it had when the round was planned.

        Example:
            >>> planner = RefillPlanner()
            >>> planner.observe_groups(["informative", "unseen", "unseen"], [True, False, True])
            >>> planner.step_counts
            {'informative': [1, 1], 'unseen': [2, 1]}
        """
        if len(strata) != len(informative):
            raise ValueError(f"{len(strata)} strata but {len(informative)} outcomes")
        counts: dict[str, list[int]] = {}
        for stratum, kept in zip(strata, informative):
            tally = counts.setdefault(stratum, [0, 0])
            tally[0] += 1
            tally[1] += bool(kept)
        for stratum, (attempted, informative_count) in counts.items():
            self.observe(attempted, informative_count, stratum=stratum)

    def step_cost(self) -> float:
        """What this step's rounds cost so far, in completion-equivalents (``rounds * latency + G * groups``)."""
        return self.step_rounds * self.latency() + self.generations * self.step_planned

    def end_step(self) -> None:
        """Fold this step's counts into the decayed history (idempotent; :meth:`first_round` calls it too)."""
        if self.step_rounds:
            self.last_step = {
                "expected_cost": self.step_expected_cost,
                "realised_cost": self.step_cost(),
                "fill_chance": self.step_fill_chance,
                "latency": self.latency(),
            }
        for stratum in set(self.estimates) | set(self.step_counts):
            attempted, informative = self.step_counts.get(stratum, (0, 0))
            self.estimates.setdefault(stratum, RetentionEstimate()).fold(attempted, informative, self.decay)
        self._reset_step()

    # --- logging and checkpoints ------------------------------------------------------------------------------------

    def expected_retention(self, stratum: str | None = None) -> float:
        """Posterior mean retention of one stratum, or pooled over all (``None``), with this step's counts so far."""
        if stratum is None:
            return self._pooled_mean()
        alpha, beta = self._posteriors({stratum})[stratum]
        return alpha / (alpha + beta)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: the decayed counts and the step in progress (checkpoints land between steps)."""
        return {
            "estimates": {
                stratum: {"informative": estimate.informative, "uninformative": estimate.uninformative}
                for stratum, estimate in self.estimates.items()
            },
            "step_target": self.step_target,
            "step_planned": self.step_planned,
            "step_counts": {stratum: list(counts) for stratum, counts in self.step_counts.items()},
            "step_rounds": self.step_rounds,
            "cost_model": self.cost_model.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.estimates = {
            stratum: RetentionEstimate(
                informative=float(saved["informative"]), uninformative=float(saved["uninformative"])
            )
            for stratum, saved in state["estimates"].items()
        }
        self.step_target = int(state["step_target"])
        self.step_planned = int(state["step_planned"])
        self.step_counts = {stratum: [int(c) for c in counts] for stratum, counts in state["step_counts"].items()}
        self.step_rounds = int(state.get("step_rounds", 0))  # older checkpoints: no cost model, no round count
        self.cost_model.load_state_dict(state.get("cost_model", {}))
