"""Prompt-history skipping: do not regenerate prompts that were zero-variance on their last visits (opt-in).

A prompt whose last ``window`` groups were all right (or all wrong) will very likely be zero-variance again, and its
group would be generated only to be dropped by dynamic sampling. :class:`PromptHistory` remembers, per dataset
index, the outcome of its last ``window`` groups and filters the indices the refill stream proposes: such a prompt
is skipped with probability ``1 - floor``. The exploration floor re-admits a share of them, so a prompt that the
policy has learned to solve (or has unlearned) is seen again and the data distribution cannot collapse onto the
currently informative prompts (the idea of GRESO, arXiv 2506.02177, with a constant floor instead of its adaptive
probabilities).

Decisions are rank-consistent without communication: the coin for a proposal is a hash of
``(seed, step, round, position, index)``, numbers every process agrees on, and the history is updated with gathered
(global) outcomes, so every process holds the same history and skips the same prompts. No torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class GroupOutcome(IntEnum):
    """What one group of a prompt turned out to be (an int, so that the trainer can gather it as a tensor)."""

    INFORMATIVE = 0
    ALL_MAX = 1  # every sibling at the highest filter reward (e.g. all right)
    ALL_MIN = 2  # every sibling at the lowest filter reward (e.g. all wrong)
    OTHER = 3  # zero-variance elsewhere (a middle value, too few scorable members, reward range not open yet)


_CODES = "IHLO"  # one character per outcome in checkpoints: Informative, High, Low, Other
_STRATA = {"I": "informative", "H": "all_max", "L": "all_min", "O": "other"}
UNSEEN = "unseen"


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
    ):
        if window < 1:
            raise ValueError(f"window={window} must be >= 1 (the number of past groups a skip is based on)")
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor={floor} must lie in [0, 1] (the chance a skippable prompt is still generated)")
        if GroupOutcome.INFORMATIVE in skip_outcomes:
            raise ValueError("informative groups never make a prompt skippable")
        if max_proposals_factor < 1:
            raise ValueError(f"max_proposals_factor={max_proposals_factor} must be >= 1")
        self.window = window
        self.floor = floor
        self.seed = seed
        self.skip_outcomes = frozenset(GroupOutcome(outcome) for outcome in skip_outcomes)
        self._skip_codes = frozenset(_CODES[outcome] for outcome in self.skip_outcomes)
        self.max_proposals_factor = max_proposals_factor
        self.outcomes: dict[int, str] = {}  # index -> codes of its last `window` groups, oldest first
        self.proposed = self.skipped = self.readmitted = self.forced = 0  # cumulative, for logging

    def record(self, indices: Sequence[int], outcomes: Sequence[int]) -> None:
        """Remember the outcome of each generated group (global lists: every process records the same)."""
        if len(indices) != len(outcomes):
            raise ValueError(f"{len(indices)} indices but {len(outcomes)} outcomes")
        for index, outcome in zip(indices, outcomes):
            code = _CODES[GroupOutcome(int(outcome))]
            self.outcomes[int(index)] = (self.outcomes.get(int(index), "") + code)[-self.window :]

    def stratum(self, index: int) -> str:
        """What the last group of ``index`` turned out to be (a planner stratum), ``"unseen"`` if never generated.

        Example:
            >>> history = PromptHistory()
            >>> history.record([3], [GroupOutcome.ALL_MIN])
            >>> history.stratum(3), history.stratum(4)
            ('all_min', 'unseen')
        """
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
        counters = state["counters"]
        self.proposed, self.skipped = int(counters["proposed"]), int(counters["skipped"])
        self.readmitted, self.forced = int(counters["readmitted"]), int(counters["forced"])
