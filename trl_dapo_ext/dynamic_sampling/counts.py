"""What a step's rounds add up to: prompt groups by outcome, refill prompts by skip decision, unscorable rewards.

Plain records, summed over rounds and processes by the trainer and read by the round plan
(`sampler.DynamicSampler.plan_round`), the logged ``dynamic_sampling/`` metrics and the messages of `messages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import torch


class GroupCounts(NamedTuple):
    """Prompt groups of a step's rounds (global), by what they turned out to be.

    Example:
        >>> counts = added(GroupCounts(attempted=4, informative=1, all_min=3), GroupCounts(attempted=2, all_max=2))
        >>> counts.attempted, counts.zero_variance
        (6, 5)
    """

    attempted: int = 0
    informative: int = 0
    surplus: int = 0  # informative, but beyond what the batch still needed (discarded)
    all_max: int = 0
    all_min: int = 0
    other: int = 0  # zero-variance elsewhere (see core.groups.GroupOutcome.OTHER)

    @property
    def zero_variance(self) -> int:
        return self.all_max + self.all_min + self.other


class SkipCounts(NamedTuple):
    """Refill prompts of a step that prompt-history skipping passed over, readmitted (exploration floor), forced."""

    skipped: int = 0
    readmitted: int = 0
    forced: int = 0


Counts = TypeVar("Counts", GroupCounts, SkipCounts)


def added(counts: Counts, more: Counts) -> Counts:
    """Two count records of the same kind, added field by field."""
    return type(counts)(*(a + b for a, b in zip(counts, more)))


@dataclass
class UnscoredRewards:
    """NaN/None rewards of one optimizer batch's rounds (gathered rows): per reward function, and for the filter.

    Example:
        >>> unscored = UnscoredRewards.empty(2)
        >>> unscored.add(torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]), filter_indices=[0], task_indices=[0, 1])
        >>> unscored.describe(["math", "format"]), unscored.scorable
        ('math: 1 of 2 NaN/None', 1)
    """

    per_func: torch.Tensor  # (n_funcs,) rows whose reward is NaN
    rows: int = 0
    scorable: int = 0  # rows whose filter reward is not NaN

    @classmethod
    def empty(cls, num_funcs: int) -> UnscoredRewards:
        return cls(per_func=torch.zeros(num_funcs, dtype=torch.long))

    def add(self, rewards_per_func: torch.Tensor, filter_indices: list[int], task_indices: list[int]) -> None:
        nan = torch.isnan(rewards_per_func).cpu()
        # Task rewards only: the overlong penalty is NaN exactly where they all are, and is not the user's to fix.
        self.per_func[task_indices] += nan[:, task_indices].sum(dim=0)
        self.rows += nan.shape[0]
        # A row counts for the filter when any filter reward scored it (combine_rewards ignores NaN terms).
        self.scorable += int((~nan[:, filter_indices]).any(dim=1).sum())

    def describe(self, names: list[str]) -> str:
        """``math_reward: 128 of 128 NaN/None, ...`` for the functions that returned any."""
        counts = [(name, int(count)) for name, count in zip(names, self.per_func.tolist()) if count]
        return ", ".join(f"{name}: {count} of {self.rows} NaN/None" for name, count in counts) or "none NaN"

    def note(self, names: list[str]) -> str:
        return f" (NaN/None rewards: {self.describe(names)})" if int(self.per_func.sum()) else ""
