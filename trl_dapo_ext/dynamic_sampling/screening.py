"""Screening: a few completions ("probes") per prompt first, a full group only for prompts that can teach.

Today's dynamic sampling generates G completions for every prompt it tries and drops the zero-variance groups after
paying for them. Screening (SPEED-RL, arXiv 2506.09016) generates ``k < G`` probes per prompt first:

* a prompt whose probes differ (*mixed* at k) is informative at G for sure: it is completed with ``G - k`` more
  completions in the same step (same policy, no optimizer step between its rounds);
* a prompt whose probes all agree is completed only when that is worth its cost: completing it buys an informative
  group with chance ``c = P(informative at G | agree at k) = (r_G - q_k) / (1 - q_k)`` (``r_G``: its stratum's
  retention at G, ``q_k``: its stratum's mixed-at-k rate; mixed at k implies informative at G) for ``G - k``
  completions, against the informative groups per completion of screening a new prompt from the stream,
  ``q_k / (k + q_k (G - k))``. Otherwise it is dropped, having cost k completions, not G.

Comparing rates is the exact rule for the objective "informative groups per completion" (a ratio: an option raises
the average iff its own rate exceeds it; Dinkelbach 1967). The stream's rate is the better of screening only and
screening then completing its agreeing prompts (:func:`stream_rate`).

Estimates: :class:`ScreeningEstimates` keeps the mixed-at-k rate per stratum (the strata of
:meth:`.history.PromptHistory.stratum`) and the informative-after-agreement rate per stratum and direction (all
right / all wrong), each a :class:`.retention.RetentionEstimate` (a Beta posterior, older steps down-weighted by
``decay``, the prior the pooled rate), the planner's retention machinery (:mod:`.planner`). ``r_G = q + (1 - q) c``.

A fixed per-step budget (default B x G completions, what plain GRPO generates) is spent by :func:`plan_budget_round`
round by round: every screened prompt reserves ``G`` completions until its probes come back, so the step never
exceeds the budget and every mixed prompt it found can be completed and trained on. In the fill-the-batch mode
:func:`plan_fill_round` screens as many new prompts as the missing groups need. No torch: plain arithmetic on counts
every process agrees on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .retention import RetentionEstimate

AGREE_HIGH, AGREE_LOW = "high", "low"  # the direction of a prompt whose probes agree: all at the top / bottom reward


def mixed_chance(success: float | np.ndarray, probes: int) -> float | np.ndarray:
    """Chance that ``probes`` binary-reward completions of a prompt with success chance ``success`` differ.

    ``1 - p^k - (1 - p)^k``; with ``probes = G`` it is the chance that a group is informative.

    Example:
        >>> mixed_chance(0.5, 2), mixed_chance(0.9, 4)  # 1 - 0.25 - 0.25; 1 - 0.6561 - 0.0001
        (0.5, 0.3438)
    """
    return 1.0 - success**probes - (1.0 - success) ** probes


def informative_after_agreement(retention: float, mixed_rate: float) -> float:
    """``P(informative at G | probes agree at k) = (r_G - q_k) / (1 - q_k)``: mixed at k implies informative at G.

    Example:
        >>> informative_after_agreement(retention=0.625, mixed_rate=0.25)  # (0.625 - 0.25) / 0.75
        0.5
    """
    if mixed_rate >= 1.0:
        return 0.0  # no prompt agrees: the conditional is void, and nothing would be completed on it
    return min(max((retention - mixed_rate) / (1.0 - mixed_rate), 0.0), 1.0)


def completion_rate(after_agreement: float, probes: int, generations: int) -> float:
    """Informative groups per completion of completing an agreeing prompt: ``c / (G - k)``.

    Example:
        >>> completion_rate(0.5, probes=2, generations=8)  # 0.5 / 6
        0.08333333333333333
    """
    _check(probes, generations)
    return after_agreement / (generations - probes)


def screening_rate(mixed_rate: float, probes: int, generations: int, latency: float = 0.0, prompts: int = 1) -> float:
    """Informative groups per completion of screening ``prompts`` new prompts and completing the mixed ones.

    ``n q / (n (k + q (G - k)) + latency)``: each costs k probes, a share ``q`` costs ``G - k`` more; ``latency``
    (completion-equivalents, the planner's round cost ``latency + completions``) is what the extra round that
    completes them costs, shared by the ``prompts`` screened together (0 when that round happens anyway).

    Example:
        >>> screening_rate(0.25, probes=2, generations=8)  # 0.25 / (2 + 0.25 * 6) = 0.25 / 3.5
        0.07142857142857142
        >>> screening_rate(0.25, probes=2, generations=8, latency=16.0, prompts=32)  # 8 / (112 + 16)
        0.0625
    """
    _check(probes, generations)
    expected_cost = prompts * (probes + mixed_rate * (generations - probes)) + latency
    return prompts * mixed_rate / expected_cost if expected_cost > 0 else 0.0


def stream_rate(
    retention: float, mixed_rate: float, probes: int, generations: int, latency: float = 0.0, prompts: int = 1
) -> float:
    """The opportunity rate: informative groups per completion of the best way to use new prompts from the stream.

    The better of screening only (:func:`screening_rate`) and screening then completing every prompt (``r_G`` per
    ``G``, whatever the probes say). Mixing two options gives a rate between theirs, so completing the stream's own
    agreeing prompts pays exactly when it beats screening only, and then the stream's rate is ``r_G / G``.

    Example:
        >>> stream_rate(retention=0.5, mixed_rate=0.25, probes=2, generations=8)  # max(0.25 / 3.5, 0.5 / 8)
        0.07142857142857142
        >>> stream_rate(retention=0.95, mixed_rate=0.4, probes=2, generations=8)  # max(0.4 / 4.4, 0.95 / 8)
        0.11875
    """
    full = prompts * retention / (prompts * generations + latency)
    return max(screening_rate(mixed_rate, probes, generations, latency, prompts), full)


def worth_screening(retention: float, probes: int, generations: int, latency: float, prompts: int) -> bool:
    """Whether a step should screen its ``prompts`` at all, rather than generate full groups in one round.

    Screening needs a second round (latency L) to complete what its probes found. Even with perfect screening
    (completing exactly the prompts informative at G) it pays ``n (k + r (G - k)) + 2 L`` for the ``n r`` groups
    that full groups buy for ``n G + L``. So it can only win when ``L < n (G - k) (1 - r)``: rounds are cheap next
    to the completions that dropping the zero-variance share saves. Without latency it always can (``r < 1``).

    Example (32 prompts, G = 8, k = 2, retention 0.8: screening saves at most 32 * 6 * 0.2 = 38.4 completions):
        >>> worth_screening(0.8, 2, 8, latency=16.0, prompts=32), worth_screening(0.8, 2, 8, latency=64.0, prompts=32)
        (True, False)
    """
    _check(probes, generations)
    return latency < prompts * (generations - probes) * (1.0 - retention)


def worth_completing(after_agreement: float, probes: int, generations: int, opportunity: float) -> bool:
    """Whether an agreeing prompt is completed: its :func:`completion_rate` reaches the ``opportunity`` rate.

    Example (q = 0.25 and r = 0.5 in the stream; an agreeing prompt of a stratum with c = 0.6):
        >>> opportunity = stream_rate(0.5, 0.25, probes=2, generations=8)  # 0.0714
        >>> worth_completing(0.6, 2, 8, opportunity), worth_completing(0.4, 2, 8, opportunity)  # 0.1 / 0.0667
        (True, False)
    """
    return after_agreement > 0.0 and completion_rate(after_agreement, probes, generations) >= opportunity


def _check(probes: int, generations: int) -> None:
    if not 1 <= probes < generations:
        raise ValueError(f"need 1 <= probes < generations, got probes={probes}, generations={generations}")


# --- estimates -------------------------------------------------------------------------------------------------------


class StratifiedRate:
    """A rate per key (stratum), each a :class:`RetentionEstimate` whose prior is the pooled rate of every key.

    The planner's retention estimate, kept the same way for another event: this step's hits enter at weight 1 when
    the step ends (:meth:`end_step`), every earlier step's at ``decay``.

    Example:
        >>> rate = StratifiedRate(decay=1.0)
        >>> rate.observe(["unseen", "unseen", "all_min"], [True, False, False])
        >>> rate.end_step()
        >>> round(rate.mean(), 3), round(rate.mean("unseen"), 3)  # (1 + 1) / (2 + 3); (0.4 * 2 + 1) / (2 + 2)
        (0.4, 0.45)
    """

    def __init__(self, decay: float = 0.8, prior_mean: float = 0.5, prior_strength: float = 2.0):
        self.decay, self.prior_mean, self.prior_strength = decay, prior_mean, prior_strength
        self.estimates: dict[str, RetentionEstimate] = {}
        self.step_counts: dict[str, list[int]] = {}  # key -> [attempts, hits] of the open step

    def observe(self, keys: Sequence[str], hits: Sequence[bool]) -> None:
        """One outcome per event, each under its key (global counts: every process observes the same)."""
        if len(keys) != len(hits):
            raise ValueError(f"{len(keys)} keys but {len(hits)} outcomes")
        for key, hit in zip(keys, hits):
            counts = self.step_counts.setdefault(str(key), [0, 0])
            counts[0] += 1
            counts[1] += bool(hit)

    def mean(self, key: str | None = None) -> float:
        """Posterior mean of ``key`` (``None``: pooled over every key), this step's counts included."""
        pooled = RetentionEstimate(self.prior_mean, self.prior_strength)
        for name in sorted({*self.estimates, *self.step_counts}):  # a fixed order: float sums must agree
            attempts, hits = self.step_counts.get(name, (0, 0))
            found = self.estimates.get(name, RetentionEstimate())
            pooled.informative += found.informative + hits
            pooled.uninformative += found.uninformative + attempts - hits
        if key is None:
            return pooled.mean()
        found = self.estimates.get(str(key), RetentionEstimate())
        own = RetentionEstimate(pooled.mean(), self.prior_strength, found.informative, found.uninformative)
        return own.mean(*self.step_counts.get(str(key), (0, 0)))

    def end_step(self) -> None:
        """Fold the open step's counts into the decayed history, in a fixed order (the same on every process)."""
        for key in [*self.estimates, *(k for k in self.step_counts if k not in self.estimates)]:
            attempts, hits = self.step_counts.get(key, (0, 0))
            self.estimates.setdefault(key, RetentionEstimate()).fold(attempts, hits, self.decay)
        self.step_counts = {}

    def state_dict(self) -> dict[str, Any]:
        return {
            "estimates": {key: [found.informative, found.uninformative] for key, found in self.estimates.items()},
            "step_counts": {key: list(counts) for key, counts in self.step_counts.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.estimates = {
            key: RetentionEstimate(informative=float(hits), uninformative=float(misses))
            for key, (hits, misses) in state["estimates"].items()
        }
        self.step_counts = {key: [int(c) for c in counts] for key, counts in state["step_counts"].items()}


class ScreeningEstimates:
    """The mixed-at-k rate per stratum and the informative-after-agreement rate per stratum and direction.

    ``r_G = q + (1 - q) c`` per stratum follows (:meth:`retention`). ``c`` is measured only on agreeing prompts
    that were completed; the caller completes a small seeded share of the others too (``explore`` in the
    simulator), so that a stratum once judged not worth completing is still measured.

    Example (a stratum of 4 screened prompts, 1 mixed; 2 of the 3 agreeing ones completed, 1 informative at G):
        >>> estimates = ScreeningEstimates(decay=1.0, prior_strength=1e-9)  # a negligible prior: the raw rates
        >>> estimates.observe_probes(["s"] * 4, [True, False, False, False])
        >>> estimates.observe_completions(["s", "s"], [AGREE_LOW, AGREE_LOW], [True, False])
        >>> round(estimates.mixed_rate("s"), 6), round(estimates.after_agreement("s"), 6)
        (0.25, 0.5)
        >>> round(estimates.retention("s"), 6)  # 0.25 + 0.75 * 0.5
        0.625
    """

    def __init__(self, decay: float = 0.8, prior_strength: float = 2.0):
        self.mixed = StratifiedRate(decay, prior_strength=prior_strength)
        self.completed = StratifiedRate(decay, prior_strength=prior_strength)

    @staticmethod
    def agreement_key(stratum: str, direction: str | None = None) -> str:
        return f"{stratum}|{direction}" if direction is not None else stratum

    def observe_probes(self, strata: Sequence[str], mixed: Sequence[bool]) -> None:
        """Per screened prompt: its stratum when it was screened, and whether its probes differed."""
        self.mixed.observe(strata, mixed)

    def observe_completions(
        self, strata: Sequence[str], directions: Sequence[str], informative: Sequence[bool]
    ) -> None:
        """Per agreeing prompt that was completed: stratum, direction (:data:`AGREE_HIGH` / :data:`AGREE_LOW`) and
        whether the full group turned out informative. Counted per stratum and also per direction."""
        keys = [self.agreement_key(s, d) for s, d in zip(strata, directions)]
        self.completed.observe([*strata, *keys], [*informative, *informative])

    def mixed_rate(self, stratum: str | None = None) -> float:
        return self.mixed.mean(stratum)

    def after_agreement(self, stratum: str | None = None, direction: str | None = None) -> float:
        """``c`` of a stratum (``None``: pooled); with a direction, that direction's own estimate when it has data."""
        key = self.agreement_key(stratum, direction) if stratum is not None else None
        if direction is not None and key not in self.completed.estimates and key not in self.completed.step_counts:
            key = stratum
        return self.completed.mean(key)

    def retention(self, stratum: str | None = None) -> float:
        q = self.mixed_rate(stratum)
        return q + (1.0 - q) * self.after_agreement(stratum)

    def end_step(self) -> None:
        self.mixed.end_step()
        self.completed.end_step()

    def state_dict(self) -> dict[str, Any]:
        return {"mixed": self.mixed.state_dict(), "completed": self.completed.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mixed.load_state_dict(state["mixed"])
        self.completed.load_state_dict(state["completed"])


# --- one round's plan ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScreeningRound:
    """What one round generates: ``G - k`` more for every mixed prompt in ``mixed`` and every agreeing prompt in
    ``complete`` (positions in the caller's lists), plus ``k`` probes for each of ``screen`` new prompts."""

    mixed: tuple[int, ...]
    complete: tuple[int, ...]
    screen: int

    def completions(self, probes: int, generations: int) -> int:
        """Completions this round generates."""
        return (len(self.mixed) + len(self.complete)) * (generations - probes) + self.screen * probes


def _best_first(values: Sequence[float]) -> list[int]:
    return sorted(range(len(values)), key=lambda i: (-values[i], i))  # ties by position: every process agrees


def plan_budget_round(
    budget_left: int,
    mixed: int,
    agreeing: Sequence[float],
    probes: int,
    generations: int,
    opportunity: float,
    last_round: bool,
    screen_cap: int | None = None,
) -> ScreeningRound:
    """One round within a fixed step budget: complete every mixed prompt, the agreeing prompts worth it, screen more.

    ``budget_left``: completions the step may still generate. ``mixed``: prompts whose probes differed, waiting for
    completion. ``agreeing``: ``c`` of each agreeing prompt not completed yet (they stay candidates for the rest of
    the step). ``opportunity``: the rate an agreeing prompt must reach (:func:`worth_completing`): the stream's rate
    (:func:`stream_rate`) while new prompts can still be screened; in the ``last_round``, which screens nothing (a
    new prompt could not be completed), the caller's floor: 0 spends the rest of the budget on any chance of a group,
    the run's rate so far spends it only where that does not raise the completions per informative group. Each new
    prompt reserves ``G`` completions (``k`` now, ``G - k`` if it turns out mixed), so ``budget_left >= mixed * (G -
    k)`` holds in every round and the step never exceeds its budget; what a round does not reserve carries over.

    Example (G = 8, k = 2, 20 completions left, 1 mixed prompt, agreeing prompts with c = 0.9 and 0.1):
        >>> plan = plan_budget_round(20, 1, [0.1, 0.9], probes=2, generations=8, opportunity=0.07, last_round=False)
        >>> plan  # 6 for the mixed one, 6 for c = 0.9 (0.15 per completion > 0.07); 8 left: 1 new prompt reserves 8
        ScreeningRound(mixed=(0,), complete=(1,), screen=1)
        >>> plan.completions(2, 8)  # 6 + 6 + 2 probes; the other 6 stay reserved for the new prompt
        14
    """
    _check(probes, generations)
    rest = generations - probes
    free = budget_left - mixed * rest
    if free < 0:
        raise ValueError(f"{mixed} mixed prompts need {mixed * rest} completions, only {budget_left} are left")
    complete = []
    for i in _best_first(agreeing):
        if free < rest:
            break
        if worth_completing(agreeing[i], probes, generations, opportunity):
            complete.append(i)
            free -= rest
    screen = 0 if last_round else free // generations
    if screen_cap is not None:
        screen = min(screen, screen_cap)
    return ScreeningRound(tuple(range(mixed)), tuple(sorted(complete)), screen)


def next_budget_round(
    budget_left: int,
    mixed: int,
    agreeing: Sequence[float],
    probes: int,
    generations: int,
    retention: float,
    mixed_rate: float,
    first_round: bool,
    last_round: bool,
    latency: float = 0.0,
    floor: float = 0.0,
    screen_cap: int | None = None,
) -> ScreeningRound | None:
    """The fixed-budget step's next round (:func:`plan_budget_round` with the stream's rate), ``None``: step done.

    ``retention`` / ``mixed_rate``: the stream's estimates (:class:`ScreeningEstimates`). ``floor``: informative groups
    per completion-equivalent a round must not fall below; 0 spends the budget (right without round latency), the
    run's rate so far makes every round pay its ``latency``. After the first round, new prompts are screened only if
    their rate, the latency of the round that completes them included, reaches the floor; otherwise this round is
    the last (completions only). A round that would only complete agreeing prompts runs only if its expected groups
    per completion-equivalent reach the floor.

    Example (G = 8, k = 2, 14 completions left, 1 mixed prompt, an agreeing one with c = 0.4; stream q = 0.25):
        >>> next_budget_round(14, 1, [0.4], 2, 8, retention=0.5, mixed_rate=0.25, first_round=False, last_round=False)
        ScreeningRound(mixed=(0,), complete=(), screen=1)

        c / 6 = 0.067 is below the stream's 0.071: the 8 left screen a new prompt. At a latency of 64 that prompt
        would pay a round of its own, 0.25 / (3.5 + 64) = 0.004 groups per completion-equivalent, below a floor of
        0.05: no new prompt, this is the last round and the agreeing prompt (0.067 >= 0.05) is completed instead:

        >>> next_budget_round(14, 1, [0.4], 2, 8, 0.5, 0.25, first_round=False, last_round=False, latency=64.0,
        ...                   floor=0.05)
        ScreeningRound(mixed=(0,), complete=(0,), screen=0)
        >>> next_budget_round(6, 0, [0.4], 2, 8, 0.5, 0.25, first_round=False, last_round=True, latency=64.0,
        ...                   floor=0.05) is None  # 0.4 groups for 6 + 64 alone: not worth a round
        True
    """
    rest = generations - probes
    prompts = max((budget_left - mixed * rest) // generations, 1)
    if not first_round and screening_rate(mixed_rate, probes, generations, latency, prompts) < floor:
        screen_cap, last_round = 0, True
    opportunity = floor if last_round else stream_rate(retention, mixed_rate, probes, generations, latency, prompts)
    plan = plan_budget_round(budget_left, mixed, agreeing, probes, generations, opportunity, last_round, screen_cap)
    if not plan.mixed and plan.complete and not plan.screen:
        gain = sum(agreeing[i] for i in plan.complete)
        if gain / (len(plan.complete) * rest + latency) < floor:
            return None
    return plan if plan.mixed or plan.complete or plan.screen else None


def plan_fill_round(
    missing: int,
    mixed: int,
    agreeing: Sequence[float],
    probes: int,
    generations: int,
    opportunity: float,
    mixed_rate: float,
    screen_cap: int,
) -> ScreeningRound:
    """One round of the fill-the-batch mode: the step needs ``missing`` more informative groups.

    Completes mixed prompts up to ``missing`` (more would be surplus: those cost their k probes only), then agreeing
    prompts worth it (:func:`worth_completing`, best first) while the expected groups fall short, and screens enough
    new prompts for what is still expected missing: ``ceil(short / q)`` (the 1x + refill rule's missing / rate, at
    the mixed-at-k rate), at most ``screen_cap``.

    Example (G = 8, k = 2, 5 groups missing, 2 mixed waiting, agreeing prompts with c = 0.9 and 0.05, q = 0.25):
        >>> plan_fill_round(5, 2, [0.9, 0.05], 2, 8, opportunity=0.07, mixed_rate=0.25, screen_cap=64)
        ScreeningRound(mixed=(0, 1), complete=(0,), screen=9)

        2 sure groups and 0.9 expected leave 2.1 short: ceil(2.1 / 0.25) = 9 new prompts.
    """
    _check(probes, generations)
    take = min(mixed, max(missing, 0))
    expected = float(take)
    complete = []
    for i in _best_first(agreeing):
        if expected >= missing or not worth_completing(agreeing[i], probes, generations, opportunity):
            break
        complete.append(i)
        expected += agreeing[i]
    short = missing - expected
    screen = 0 if short <= 1e-9 else min(math.ceil(short / max(mixed_rate, 1e-6) - 1e-9), screen_cap)
    return ScreeningRound(tuple(range(take)), tuple(sorted(complete)), max(screen, 0))


# --- the best any k-probe rule can do ---------------------------------------------------------------------------------


def probe_rule_bound(success: np.ndarray, probes: int, generations: int) -> tuple[float, tuple[str, ...]]:
    """Least completions per informative group of any rule that screens stream prompts with ``probes`` binary probes.

    Such a rule sees a prompt's probes only (no history): it completes mixed prompts (rate ``1 / (G - k)``, the best
    there is) and, per direction of agreement, all or none of the agreeing ones (a ratio objective is optimal at a
    vertex). Exact for prompts drawn from ``success`` (success chances, uniformly): every option is tried.
    Returns the cost and the directions completed.

    Example (half the prompts never solved, half at p = 1/2; G = 8, k = 2):
        >>> cost, completed = probe_rule_bound(np.array([0.0, 0.5]), probes=2, generations=8)
        >>> round(cost, 3), completed
        (11.393, ('high',))

        Screening only costs 4 prompts per mixed one, 4 * 2 + 6 = 14 per informative group. Completing the prompts
        whose 2 probes were both right (only p = 1/2 ones: 1/8 of all) is cheaper: per prompt 2 + 6 * (1/4 + 1/8)
        = 4.25 completions for 1/4 + 1/8 - 1/2^9 = 0.373 informative groups, 11.39 each.
    """
    _check(probes, generations)
    p = np.asarray(success, dtype=float)
    q = float(np.mean(mixed_chance(p, probes)))
    agree = {AGREE_HIGH: p**probes, AGREE_LOW: (1.0 - p) ** probes}
    # informative at G after agreeing: 1 - P(all G agree); P(agree at k and informative at G) = p^k - p^G
    gain = {AGREE_HIGH: p**probes - p**generations, AGREE_LOW: (1.0 - p) ** probes - (1.0 - p) ** generations}
    best = (math.inf, ())
    for completed in ((), (AGREE_HIGH,), (AGREE_LOW,), (AGREE_HIGH, AGREE_LOW)):
        cost = probes + (generations - probes) * (q + sum(float(np.mean(agree[d])) for d in completed))
        informative = q + sum(float(np.mean(gain[d])) for d in completed)
        if informative > 0:
            best = min(best, (cost / informative, completed), key=lambda pair: pair[0])
    return best
