"""How many prompt groups each dynamic-sampling round should generate: adaptive oversampling with a confidence margin.

Dynamic sampling keeps only *informative* groups (the task reward varies). A round that asks for too few prompts
needs another round (another generation call, with its fixed cost and long tail); one that asks for too many
generates surplus informative groups that are thrown away. :class:`RefillPlanner` sizes each round from a running
estimate of the retention rate (informative groups / attempted groups):

* The estimate is a Beta posterior over the retention rate: a weak prior plus the counts of earlier steps, each step
  down-weighted by ``decay`` so that the estimate follows a policy that is learning (retention drifts).
* A round of ``n`` groups yields a Beta-Binomial number of informative groups (a Binomial whose rate is itself
  uncertain), so the planner picks the smallest ``n`` whose chance of filling the batch is at least ``confidence``
  (on every process: ``confidence ** (1 / num_processes)`` per process, which is conservative because the
  processes share one retention rate). The margin therefore shrinks by itself as evidence accumulates, and a
  retention rate of 0 just means the largest round allowed, never a division by zero.
* Rounds are capped (``max_oversample`` times the batch's groups: the memory of one generation call) and so is the
  whole step (``max_groups_per_step``): the planner never asks for more than what is left of the budget.

Everything is plain arithmetic on counts that every process agrees on (gathered counts), so every process computes
the same plan. No torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SOURCES = ("batch", "refill")


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


def beta_binomial_pmf(trials: int, alpha: float, beta: float) -> list[float]:
    """``P(Y = y)`` for ``y = 0..trials`` when ``Y ~ Binomial(trials, r)`` and ``r ~ Beta(alpha, beta)``.

    Example:
        >>> [round(p, 3) for p in beta_binomial_pmf(2, 1.0, 1.0)]  # a uniform rate: every count equally likely
        [0.333, 0.333, 0.333]
    """
    if trials < 0 or alpha <= 0 or beta <= 0:
        raise ValueError(f"need trials >= 0 and alpha, beta > 0, got {trials}, {alpha}, {beta}")
    log_norm = math.lgamma(alpha + beta) - math.lgamma(alpha) - math.lgamma(beta) - math.lgamma(alpha + beta + trials)
    log_n = math.lgamma(trials + 1)
    pmf = [
        math.exp(
            log_n
            - math.lgamma(y + 1)
            - math.lgamma(trials - y + 1)
            + math.lgamma(y + alpha)
            + math.lgamma(trials - y + beta)
            + log_norm
        )
        for y in range(trials + 1)
    ]
    total = sum(pmf)  # renormalise away rounding so that tail sums stay within [0, 1]
    return [p / total for p in pmf]


def at_least_probability(needed: int, sources: list[tuple[int, float, float]]) -> float:
    """``P(Y_1 + ... + Y_k >= needed)`` for independent Beta-Binomial ``Y_i`` given as ``(trials, alpha, beta)``.

    Example:
        >>> round(at_least_probability(1, [(1, 1.0, 1.0), (1, 1.0, 1.0)]), 3)  # 1 - P(both 0) = 1 - 1/2 * 1/2
        0.75
    """
    if needed <= 0:
        return 1.0
    sources = [source for source in sources if source[0] > 0]
    if not sources:
        return 0.0
    distribution = [1.0]  # pmf of the sum of all sources but the last
    for trials, alpha, beta in sources[:-1]:
        pmf = beta_binomial_pmf(trials, alpha, beta)
        combined = [0.0] * (len(distribution) + trials)
        for x, px in enumerate(distribution):
            for y, py in enumerate(pmf):
                combined[x + y] += px * py
        distribution = combined
    # The last source (the refill, the largest) only through its tail: O(len) instead of a full convolution.
    last = beta_binomial_pmf(*sources[-1])
    tail = [0.0] * (len(last) + 1)  # tail[k] = P(last >= k)
    for k in range(len(last) - 1, -1, -1):
        tail[k] = tail[k + 1] + last[k]
    total = sum(px * tail[min(max(needed - x, 0), len(last))] for x, px in enumerate(distribution))
    return min(1.0, total)


class RefillPlanner:
    """Sizes dynamic-sampling rounds so that one round usually fills the batch, within a hard budget.

    All group counts passed in and returned are **per process** except those given to :meth:`observe`, which are
    **global** (summed over processes: retention is a ratio, so either works, and global counts are what the
    trainer gathers anyway). Per optimizer batch the trainer calls::

        refill = planner.first_round(target_groups)            # extra groups for round 1 (besides the batch's own)
        ... generate, filter ...
        planner.observe(attempted, informative, source=...)    # once per round (and source), global counts
        refill = planner.next_round(missing_groups, rounds_left)  # while some process still misses groups
        ...
        planner.end_step()

    ``source`` tells the trainer's own batch prompts (``"batch"``) from the refill stream's (``"refill"``). They
    only differ when the refill stream is filtered (prompt-history skipping); with ``separate_sources=False`` both
    feed one estimate.

    Example:
        >>> planner = RefillPlanner(max_oversample=4.0, confidence=0.95)
        >>> for _ in range(20):  # a stable retention rate of 1/2
        ...     refill = planner.first_round(target_groups=32)
        ...     planner.observe(attempted=32 + refill, informative=(32 + refill) // 2)
        ...     planner.end_step()
        >>> planner.first_round(target_groups=32)  # 32 / 0.5 = 64 groups plus a 95% margin (81), less the batch's 32
        49
        >>> planner.next_round(missing_groups=3, rounds_left=5)  # after round 1 fell 3 groups short
        11
    """

    def __init__(
        self,
        max_oversample: float = 4.0,
        max_groups_per_step: int | None = None,
        confidence: float = 0.95,
        last_round_confidence: float = 0.999,
        decay: float = 0.8,
        prior_retention: float = 0.5,
        prior_strength: float = 2.0,
        num_processes: int = 1,
        separate_sources: bool = False,
    ):
        if not max_oversample >= 1.0:
            raise ValueError(f"max_oversample={max_oversample} must be >= 1: round 1 holds at least the batch")
        if max_groups_per_step is not None and max_groups_per_step < 1:
            raise ValueError(f"max_groups_per_step={max_groups_per_step} must be >= 1 or None (no step budget)")
        for name, value in (("confidence", confidence), ("last_round_confidence", last_round_confidence)):
            if not 0.0 < value < 1.0:
                raise ValueError(f"{name}={value} must lie strictly between 0 and 1")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay={decay} must lie in [0, 1] (1 keeps every step at full weight)")
        if not 0.0 < prior_retention < 1.0 or not prior_strength > 0:
            raise ValueError("prior_retention must lie in (0, 1) and prior_strength must be > 0")
        if num_processes < 1:
            raise ValueError(f"num_processes={num_processes} must be >= 1")
        self.max_oversample = max_oversample
        self.max_groups_per_step = max_groups_per_step
        self.confidence = confidence
        self.last_round_confidence = last_round_confidence
        self.decay = decay
        self.num_processes = num_processes
        self.separate_sources = separate_sources
        self.estimates = {
            source: RetentionEstimate(prior_mean=prior_retention, prior_strength=prior_strength) for source in SOURCES
        }
        self._reset_step()

    # --- per step ---------------------------------------------------------------------------------------------------

    def _reset_step(self) -> None:
        self.step_target = 0  # groups per process the batch needs
        self.step_planned = 0  # groups per process generated or planned this step, the batch's own included
        self.step_counts = {source: [0, 0] for source in SOURCES}  # global [attempted, informative]

    def _source(self, source: str) -> str:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        return source if self.separate_sources else "batch"

    def _posterior(self, source: str) -> tuple[float, float]:
        source = self._source(source)
        return self.estimates[source].alpha_beta(*self.step_counts[source])

    def _per_process_confidence(self, rounds_left: int | None) -> float:
        wanted = self.last_round_confidence if rounds_left == 1 else self.confidence
        return wanted ** (1.0 / self.num_processes)

    def _round_cap(self) -> int:
        return math.ceil(self.step_target * self.max_oversample)

    def _budget_left(self) -> int | None:
        if self.max_groups_per_step is None:
            return None
        return max(self.max_groups_per_step - self.step_planned, 0)

    def _smallest_refill(self, needed: int, fixed: list[tuple[int, float, float]], upper: int, wanted: float) -> int:
        """Smallest refill count in ``[0, upper]`` whose chance to yield ``needed`` groups reaches ``wanted``.

        ``fixed`` are groups already in the round (the batch's own). Returns ``upper`` when even that falls short.
        """
        alpha, beta = self._posterior("refill")

        def chance(refill: int) -> float:
            if not self.separate_sources:  # one shared rate: the whole round is a single Beta-Binomial
                trials = refill + sum(trials for trials, _, _ in fixed)
                return at_least_probability(needed, [(trials, alpha, beta)])
            return at_least_probability(needed, [*fixed, (refill, alpha, beta)])

        if upper <= 0 or chance(0) >= wanted:
            return 0
        if chance(upper) < wanted:
            return upper
        low, high = 0, upper  # chance(low) < wanted <= chance(high); chance grows with the refill count
        while high - low > 1:
            middle = (low + high) // 2
            if chance(middle) >= wanted:
                high = middle
            else:
                low = middle
        return high

    def first_round(self, target_groups: int, rounds_left: int | None = None) -> int:
        """Start a step: how many refill groups (per process) round 1 adds to the batch's own ``target_groups``.

        ``rounds_left`` counts round 1 itself (``dynamic_sampling_max_rounds``); with 1 the planner aims at
        ``last_round_confidence``. Folds a previous step that was not closed with :meth:`end_step`.

        Example:
            >>> RefillPlanner(max_oversample=3.0).first_round(8)  # no evidence yet: the largest round allowed
            16
        """
        if target_groups < 0:
            raise ValueError(f"target_groups={target_groups} must be >= 0")
        self.end_step()
        self.step_target = target_groups
        upper = self._round_cap() - target_groups
        if self.max_groups_per_step is not None:
            upper = min(upper, self.max_groups_per_step - target_groups)
        batch_alpha, batch_beta = self._posterior("batch")
        refill = self._smallest_refill(
            needed=target_groups,
            fixed=[(target_groups, batch_alpha, batch_beta)],
            upper=max(upper, 0),
            wanted=self._per_process_confidence(rounds_left),
        )
        self.step_planned = target_groups + refill
        return refill

    def next_round(self, missing_groups: int, rounds_left: int | None = None) -> int:
        """Refill groups (per process) for the next round; ``missing_groups`` is the maximum over processes.

        ``rounds_left`` counts the round being planned; with 1 the planner aims at ``last_round_confidence``.
        Returns 0 when nothing is missing or the step's budget is spent (the trainer must then stop: exhausted),
        otherwise at least 1 and never more than the round cap or what is left of ``max_groups_per_step``.

        Example:
            >>> planner = RefillPlanner(max_oversample=3.0, max_groups_per_step=20)
            >>> planner.first_round(8)
            12
            >>> planner.observe(attempted=20, informative=0)
            >>> planner.next_round(missing_groups=8)  # the step's 20 groups are spent: stop (exhausted)
            0
        """
        if missing_groups <= 0:
            return 0
        upper = max(self._round_cap(), 1)
        budget = self._budget_left()
        if budget is not None:
            upper = min(upper, budget)
        if upper <= 0:
            return 0
        refill = max(1, self._smallest_refill(missing_groups, [], upper, self._per_process_confidence(rounds_left)))
        self.step_planned += refill
        return refill

    def observe(self, attempted: int, informative: int, source: str = "refill") -> None:
        """Global counts of one round's groups from one source (call once per source per round)."""
        if not 0 <= informative <= attempted:
            raise ValueError(f"need 0 <= informative <= attempted, got informative={informative}, {attempted=}")
        counts = self.step_counts[self._source(source)]
        counts[0] += attempted
        counts[1] += informative

    def end_step(self) -> None:
        """Fold this step's counts into the decayed history (idempotent; :meth:`first_round` calls it too)."""
        for source in SOURCES:
            attempted, informative = self.step_counts[source]
            if attempted:
                self.estimates[source].fold(attempted, informative, self.decay)
        self._reset_step()

    # --- logging and checkpoints ------------------------------------------------------------------------------------

    def expected_retention(self, source: str = "refill") -> float:
        """Posterior mean retention (with this step's counts so far), e.g. for a ``dynamic_sampling/`` metric."""
        alpha, beta = self._posterior(source)
        return alpha / (alpha + beta)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: the decayed counts and the step in progress (checkpoints land between steps)."""
        return {
            "estimates": {
                source: {"informative": estimate.informative, "uninformative": estimate.uninformative}
                for source, estimate in self.estimates.items()
            },
            "step_target": self.step_target,
            "step_planned": self.step_planned,
            "step_counts": {source: list(counts) for source, counts in self.step_counts.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for source, saved in state["estimates"].items():
            self.estimates[source].informative = float(saved["informative"])
            self.estimates[source].uninformative = float(saved["uninformative"])
        self.step_target = int(state["step_target"])
        self.step_planned = int(state["step_planned"])
        self.step_counts = {source: [int(c) for c in counts] for source, counts in state["step_counts"].items()}
