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

The pieces live beside it: the fixed-factor rule in :mod:`.fixed_factor`, the fill-chance rule in
:mod:`.fill_chance`, the cost rule's direct search and future values in :mod:`.cost_search` (its fast search for large
batches in :mod:`.scoring`), the cost model and the recursion in :mod:`.round_cost`, the retention estimates and
Beta-Binomial laws in :mod:`.retention`. This module holds the planner's state (estimates, the step in progress, the
checkpoint) and picks the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

# The round loop and benchmarks import the fixed-factor rule (and REFILL, RoundCostModel) from here: re-exported.
from .cost_search import REFILL, cheapest_refill_direct, future_values, shared_refill_posterior  # noqa: F401
from .fill_chance import fill_chance, smallest_refill
from .fixed_factor import fixed_first_refill, plan_refill_groups  # noqa: F401
from .retention import RetentionEstimate
from .round_cost import Costs, RoundCostModel
from .scoring import cheapest_refill_fast

# --------------------------------------------------------------------------------------------- the planner

POOLED = "all"  # the stratum of prompts the caller does not stratify
EXACT_UP_TO = 128  # direct search up to this shortfall and 4x it per round (RefillPlanner.exact_up_to)
DEFAULT_ROUNDS = 10  # rounds a step may take when the caller does not say (dynamic_sampling_max_rounds default)


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
        >>> planner.first_round(target_groups=32)  # 32 / 0.5 = 64 groups plus a 95% margin (81), less the batch's 32
        49
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
        # there); larger ones by scoring.cheapest_refill_fast. Tests and benchmarks raise it to compare.
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
        self.step_expected_retention = math.nan  # pooled retention estimate the step was planned with

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

    def _smallest_refill(
        self, needed: Sequence[int], own: Sequence[Strata], candidates: Candidates | None, upper: int, wanted: float
    ) -> int:
        """Smallest refill count in ``[0, upper]`` whose chance to fill every process reaches ``wanted``.

        Returns ``upper`` when even that falls short (:func:`.fill_chance.smallest_refill`: a bisection).
        """
        if upper <= 0:
            return 0
        peeked = self._peek(candidates, upper)
        posteriors = self._posteriors({s for groups in (*own, peeked) for s in groups})  # fixed during the search

        def chance(refill: int) -> float:
            return fill_chance(needed, own, peeked, refill, posteriors)

        return smallest_refill(chance, upper, wanted)

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
        (:func:`.cost_search.future_values` over the rounds after it). The batch's own groups count by their strata;
        refill groups by the mean of the stream's next prompts (:func:`.cost_search.shared_refill_posterior`).
        Records the plan's expected cost and its chance to fill the batch in ``_plan``.
        """
        limit = max(needed)
        peeked = self._peek(candidates, upper)
        posteriors = self._posteriors(set(peeked).union(*own))  # set() at C speed: the peek is long
        refill_posterior = shared_refill_posterior(peeked, posteriors, self._pooled_alpha_beta())
        later_rounds = (rounds_left - 1) if rounds_left is not None else DEFAULT_ROUNDS - 1
        later_cap = self._round_cap()
        if self.max_groups_per_step is not None:  # what the budget leaves after a round of the least useful size
            later_cap = min(later_cap, self.next_budget() - max(lower, min(limit, upper)))
        # The direct search costs O(round cap * L) for its Beta-Binomial rows and O(L^2) per candidate: fast for the
        # shortfalls and rounds of a batch of up to exact_up_to groups (round cap 4x), too slow past them.
        fast = limit > self.exact_up_to or upper > 4 * self.exact_up_to  # then the same plan, O(L log L) per candidate
        costs = self._costs()
        rounds, cap, method = max(later_rounds, 0), max(later_cap, 0), "fft" if fast else "direct"
        values = future_values(costs, limit, rounds, cap, refill_posterior, self.num_processes, method)
        search = cheapest_refill_fast if fast else cheapest_refill_direct
        refill, self._plan = search(costs, needed, own, posteriors, refill_posterior, values, lower, upper)
        return refill

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
        self.step_expected_retention = self._pooled_mean()  # from earlier steps only: nothing of this one is folded
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
        if not self.step_rounds and not self.step_counts:
            return  # no step open: folding would decay the evidence a second time for the same step
        if self.step_rounds:
            self.last_step = {
                "expected_cost": self.step_expected_cost,
                "realised_cost": self.step_cost(),
                "fill_chance": self.step_fill_chance,
                "expected_retention": self.step_expected_retention,
                "latency": self.latency(),
            }
        # Known strata first, then this step's new ones in the order they were observed: the same order on every
        # process (a set's order follows the process's string-hash seed, and the pooled sums follow this order).
        new_strata = [stratum for stratum in self.step_counts if stratum not in self.estimates]
        for stratum in [*self.estimates, *new_strata]:
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
