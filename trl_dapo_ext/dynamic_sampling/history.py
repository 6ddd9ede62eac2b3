"""Prompt-history skipping: do not regenerate prompts that were zero-variance on their last visits (opt-in).

A prompt whose last ``window`` groups were all right (or all wrong) will very likely be zero-variance again, and its
group would be generated only to be dropped by dynamic sampling. :class:`PromptHistory` remembers, per dataset
index, the outcome of its last ``window`` groups and filters the indices the refill stream proposes: such a prompt
is skipped with probability ``1 - floor``. The exploration floor re-admits a share of them, so a prompt that the
policy has learned to solve (or has unlearned) is seen again and the data distribution cannot collapse onto the
currently informative prompts (the idea of GRESO, arXiv 2506.02177, with a constant floor instead of its adaptive
probabilities).

The same history feeds the refill planner's strata (:meth:`PromptHistory.stratum`). When the caller also records how
many completions of each group landed in the upper half of the reward range, the history keeps a per-prompt tally
of them and predicts the chance that the prompt's next group is informative; prompts are then grouped by that
prediction (ten buckets) instead of by their last outcome alone, which tells a prompt that was 1 of 8 right from one
that was 4 of 8 right, and a prompt that was all wrong three times from one that was all wrong once.

Decisions are rank-consistent without communication: the coin for a proposal is a hash of
``(seed, step, round, position, index)``, numbers every process agrees on, and the history is updated with gathered
(global) outcomes, so every process holds the same history and skips the same prompts. No torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.groups import GroupOutcome

_CODES = "IHLO"  # one character per outcome in checkpoints: Informative, High, Low, Other
_STRATA = {"I": "informative", "H": "all_max", "L": "all_min", "O": "other"}
UNSEEN = "unseen"
PREDICTION_BUCKETS = 10  # strata of prompts with a tally: predicted retention in [0, 0.1), [0.1, 0.2), ...
_JEFFREYS = 0.5  # Beta(1/2, 1/2) prior on a prompt's upper-half share: weak, symmetric, proper


def predicted_retention(upper: float, lower: float, generations: int) -> float:
    """Chance that a group of ``generations`` completions is informative, given past upper/lower completion counts.

    Each completion lands in the upper half of the reward range with an unknown per-prompt chance ``s``, with
    posterior ``Beta(1/2 + upper, 1/2 + lower)``; the group is zero-variance when all land on one side, so the
    chance is ``1 - E[s^G] - E[(1 - s)^G]`` with ``E[s^G] = prod_k (a + k) / (a + b + k)`` (Beta moments). For 0/1
    rewards this is exactly DAPO's keep rule; for graded rewards it underestimates (groups on one side can still
    vary), which the planner's per-stratum retention estimates correct.

    Example:
        >>> round(predicted_retention(0, 0, 2), 3)  # no evidence: 1 - 2 * E[s^2] with s ~ Beta(1/2, 1/2)
        0.25
        >>> predicted_retention(4, 4, 8) > 0.9 > 0.5 > predicted_retention(16, 0, 8)  # 4 of 8 right vs 16 of 16
        True
    """
    a, b = _JEFFREYS + upper, _JEFFREYS + lower
    all_upper = all_lower = 1.0
    for k in range(generations):
        all_upper *= (a + k) / (a + b + k)
        all_lower *= (b + k) / (a + b + k)
    return max(0.0, 1.0 - all_upper - all_lower)


def seeded_uniform(seed: int, *keys: int) -> float:
    """A deterministic number in ``[0, 1)`` from integers: the same on every process, platform and Python run.

    Example:
        >>> seeded_uniform(0, 3, 1, 7) == seeded_uniform(0, 3, 1, 7) != seeded_uniform(1, 3, 1, 7)
        True
    """
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


@dataclass(frozen=True)
class Admission:
    """The result of one :meth:`PromptHistory.admit` call (global: the same on every process).

    ``admitted``: the indices to generate, in stream order. ``proposed``: how many the stream handed out.
    ``skipped``: proposals dropped as known zero-variance. ``readmitted``: proposals that qualified for skipping
    but were kept by the exploration floor. ``forced``: proposals kept without a coin because ``max_proposals``
    was reached (everything left looked zero-variance).
    """

    admitted: list[int]
    proposed: int
    skipped: int
    readmitted: int
    forced: int


class PromptHistory:
    """Per dataset index, the outcomes of its last ``window`` groups, and the skip rule built on them.

    Example:
        >>> history = PromptHistory(window=1, floor=0.0, seed=0)
        >>> history.record([4, 5], [GroupOutcome.ALL_MAX, GroupOutcome.INFORMATIVE])
        >>> stream = iter([4, 5, 6, 7])
        >>> admission = history.admit(lambda n: [next(stream) for _ in range(n)], count=2, step=1, round_index=1)
        >>> admission.admitted, admission.skipped  # 4 was all right last time: skipped, 6 drawn instead
        ([5, 6], 1)
    """

    def __init__(
        self,
        window: int = 1,
        floor: float = 0.1,
        seed: int = 0,
        skip_outcomes: Sequence[GroupOutcome] = (GroupOutcome.ALL_MAX, GroupOutcome.ALL_MIN, GroupOutcome.OTHER),
        max_proposals_factor: int = 20,
        generations: int | None = None,
        tally_decay: float = 0.7,
    ):
        if window < 1:
            raise ValueError(f"window={window} must be >= 1 (the number of past groups a skip is based on)")
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor={floor} must lie in [0, 1] (the chance a skippable prompt is still generated)")
        if GroupOutcome.INFORMATIVE in skip_outcomes:
            raise ValueError("informative groups never make a prompt skippable")
        if max_proposals_factor < 1:
            raise ValueError(f"max_proposals_factor={max_proposals_factor} must be >= 1")
        if generations is not None and generations < 2:
            raise ValueError(f"generations={generations} must be >= 2 (completions per group) or None")
        if not 0.0 <= tally_decay <= 1.0:
            raise ValueError(f"tally_decay={tally_decay} must lie in [0, 1] (1 keeps every visit at full weight)")
        self.window = window
        self.floor = floor
        self.seed = seed
        self.skip_outcomes = frozenset(GroupOutcome(outcome) for outcome in skip_outcomes)
        self._skip_codes = frozenset(_CODES[outcome] for outcome in self.skip_outcomes)
        self.max_proposals_factor = max_proposals_factor
        self.generations = generations
        self.tally_decay = tally_decay
        self.outcomes: dict[int, str] = {}  # index -> codes of its last `window` groups, oldest first
        # index -> completions in the upper / lower half of the reward range, earlier visits weighted by tally_decay
        # per later visit (the policy learns: an old visit says less about the next one).
        self.tallies: dict[int, tuple[float, float]] = {}
        self.proposed = self.skipped = self.readmitted = self.forced = 0  # cumulative, for logging

    def record(
        self,
        indices: Sequence[int],
        outcomes: Sequence[int],
        upper: Sequence[int] | None = None,
        scorable: Sequence[int] | None = None,
    ) -> None:
        """Remember the outcome of each generated group (global lists: every process records the same).

        ``upper`` / ``scorable`` (optional, per group): how many completions landed in the upper half of the reward
        range, and how many were scored at all; a negative ``upper`` means unknown (e.g. the range is not open yet).
        They feed :func:`predicted_retention` and so the strata.
        """
        if len(indices) != len(outcomes):
            raise ValueError(f"{len(indices)} indices but {len(outcomes)} outcomes")
        for index, outcome in zip(indices, outcomes):
            code = _CODES[GroupOutcome(int(outcome))]
            self.outcomes[int(index)] = (self.outcomes.get(int(index), "") + code)[-self.window :]
        if upper is None:
            return
        if scorable is None or not len(upper) == len(scorable) == len(indices):
            raise ValueError("upper and scorable need one count per index")
        for index, high, total in zip(indices, upper, scorable):
            if high < 0 or total <= 0:
                continue
            if high > total:
                raise ValueError(f"index {index}: {high} upper completions out of {total} scorable")
            old_high, old_low = self.tallies.get(int(index), (0.0, 0.0))
            decay = self.tally_decay
            self.tallies[int(index)] = (decay * old_high + int(high), decay * old_low + int(total) - int(high))

    def predicted_retention(self, index: int) -> float | None:
        """:func:`predicted_retention` from the prompt's tally, ``None`` without one (or without ``generations``)."""
        tally = self.tallies.get(int(index))
        if tally is None or self.generations is None:
            return None
        return predicted_retention(*tally, self.generations)

    def stratum(self, index: int) -> str:
        """The planner stratum of ``index``: its predicted-retention bucket when it has a tally (and ``generations``
        is set), else what its last group turned out to be, ``"unseen"`` if never generated.

        Example:
            >>> history = PromptHistory(generations=8)
            >>> history.record([3, 5], [GroupOutcome.ALL_MIN, GroupOutcome.INFORMATIVE], upper=[-1, 4], scorable=[8, 8])
            >>> history.stratum(3), history.stratum(4), history.stratum(5)
            ('all_min', 'unseen', 'predicted 0.9-1.0')
        """
        prediction = self.predicted_retention(index)
        if prediction is not None:
            bucket = min(int(prediction * PREDICTION_BUCKETS), PREDICTION_BUCKETS - 1)
            return f"predicted {bucket / PREDICTION_BUCKETS:.1f}-{(bucket + 1) / PREDICTION_BUCKETS:.1f}"
        codes = self.outcomes.get(int(index))
        return _STRATA[codes[-1]] if codes else UNSEEN

    def skippable(self, index: int) -> bool:
        """Whether ``index`` was zero-variance (of a skipped kind) in each of its last ``window`` groups."""
        codes = self.outcomes.get(index, "")
        return len(codes) == self.window and all(code in self._skip_codes for code in codes)

    def admit(
        self,
        propose: Callable[[int], list[int]],
        count: int,
        step: int,
        round_index: int,
        max_proposals: int | None = None,
        commit: bool = True,
    ) -> Admission:
        """Draw from ``propose`` (e.g. ``RefillSampler.take``) until ``count`` indices are admitted.

        ``step`` and ``round_index`` key the coins, so pass numbers every process agrees on (the global step and
        the round within it). At most ``max_proposals`` (default ``max_proposals_factor * count``) indices are
        drawn; past that the rest are admitted without a coin (``forced``), so the call always returns ``count``
        indices even if every prompt looks zero-variance. ``commit=False`` leaves the cumulative counters alone (a
        dry run, e.g. on a copy of the stream to preview what a round would admit: the coins make it repeatable).
        """
        if count <= 0:
            return Admission(admitted=[], proposed=0, skipped=0, readmitted=0, forced=0)
        limit = max(max_proposals if max_proposals is not None else self.max_proposals_factor * count, count)
        admitted: list[int] = []
        proposed = skipped = readmitted = forced = 0
        while len(admitted) < count:
            # Ask for exactly what is still missing: the stream advances only by indices actually considered.
            for index in propose(count - len(admitted)):
                position = proposed
                proposed += 1
                if not self.skippable(index):
                    admitted.append(index)
                elif limit - position <= count - len(admitted):  # no room left to skip: keep the rest
                    admitted.append(index)
                    forced += 1
                elif seeded_uniform(self.seed, step, round_index, position, index) < self.floor:
                    admitted.append(index)
                    readmitted += 1
                else:
                    skipped += 1
        if not commit:
            return Admission(
                admitted=admitted, proposed=proposed, skipped=skipped, readmitted=readmitted, forced=forced
            )
        self.proposed += proposed
        self.skipped += skipped
        self.readmitted += readmitted
        self.forced += forced
        return Admission(admitted=admitted, proposed=proposed, skipped=skipped, readmitted=readmitted, forced=forced)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: settings (checked on load), per-index outcome codes and the counters."""
        return {
            "window": self.window,
            "seed": self.seed,
            "outcomes": {str(index): codes for index, codes in self.outcomes.items()},
            "tallies": {str(index): list(tally) for index, tally in self.tallies.items()},
            "counters": {
                "proposed": self.proposed,
                "skipped": self.skipped,
                "readmitted": self.readmitted,
                "forced": self.forced,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["seed"] != self.seed:
            raise ValueError(
                f"prompt history was saved with seed={state['seed']!r} but this run has {self.seed!r}; "
                "resume with the same seed or start a fresh history"
            )
        # A different window is allowed: longer windows just need more visits before a prompt is skippable.
        self.outcomes = {int(index): codes[-self.window :] for index, codes in state["outcomes"].items()}
        # Checkpoints written before the tallies existed have none: those prompts fall back to their last outcome.
        self.tallies = {
            int(index): (float(high), float(low)) for index, (high, low) in state.get("tallies", {}).items()
        }
        counters = state["counters"]
        self.proposed, self.skipped = int(counters["proposed"]), int(counters["skipped"])
        self.readmitted, self.forced = int(counters["readmitted"]), int(counters["forced"])
