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

How many prompts a round screens is `screen_plan.screening_round`'s; the trainer's collector
(`screening_rounds.ScreeningCollector`) calls these rules. No torch: plain arithmetic on counts every process agrees
on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
