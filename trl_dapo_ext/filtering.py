"""DAPO dynamic sampling as plain tensor functions: which groups are informative, and how many to ask for next.

A group of ``G`` completions of one prompt is *informative* when its task reward varies: the population standard
deviation of the reward over its scorable (non-NaN) members exceeds a tolerance. A group whose rewards are all equal
(all right, all wrong) has advantage 0 under any group baseline and only wastes its share of the update batch
(DAPO Sec. 3.2, Eq. 11: keep groups with ``0 < |{correct}| < G``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .history import GroupOutcome


def group_reward_spread(rewards: torch.Tensor, num_generations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group: population std of the scorable rewards, and the number of scorable members.

    Example:
        >>> spread, scorable = group_reward_spread(torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0]), 3)
        >>> [round(s, 6) for s in spread.tolist()], scorable.tolist()  # sqrt(2/9) = 0.471405
        ([0.471405, 0.0], [3, 3])
    """
    grouped = rewards.view(-1, num_generations).double()  # float64: a spread of 1e-8 must not round to 0
    scorable = (~torch.isnan(grouped)).sum(dim=1)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    variance = torch.nanmean((grouped - mean) ** 2, dim=1)
    spread = torch.sqrt(variance)
    return torch.nan_to_num(spread, nan=0.0), scorable


def informative_groups(rewards: torch.Tensor, num_generations: int, tolerance: float = 0.0) -> torch.Tensor:
    """Bool per group: at least two scorable members whose rewards have population std ``> tolerance``.

    Example:
        >>> informative_groups(torch.tensor([1.0, 0.0, 1.0, 1.0, float("nan"), float("nan")]), 2).tolist()
        [True, False, False]
    """
    if rewards.dim() != 1 or rewards.numel() % num_generations != 0:
        raise ValueError(
            f"rewards must be a flat tensor of whole groups of {num_generations}, got {tuple(rewards.shape)}"
        )
    spread, scorable = group_reward_spread(rewards, num_generations)
    return (scorable >= 2) & (spread > tolerance)


@dataclass(frozen=True)
class ZeroVarianceSplit:
    """Counts of uninformative groups: at the highest reward, at the lowest, and the rest."""

    all_max: int
    all_min: int
    other: int


def group_outcomes(
    rewards: torch.Tensor, num_generations: int, informative: torch.Tensor, lowest: float, highest: float
) -> list[GroupOutcome]:
    """Per group: informative, or which kind of zero-variance (see :func:`zero_variance_split` for the rule).

    The prompt history (``history.PromptHistory.record``) remembers these; ints, so they gather as a tensor.

    Example:
        >>> r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5])
        >>> [outcome.name for outcome in group_outcomes(r, 2, informative_groups(r, 2), lowest=0.0, highest=1.0)]
        ['ALL_MAX', 'ALL_MIN', 'INFORMATIVE', 'OTHER']
    """
    outcomes = []
    for group, keep in zip(rewards.view(-1, num_generations), informative.tolist()):
        values = group[~torch.isnan(group)]
        if keep:
            outcomes.append(GroupOutcome.INFORMATIVE)
        elif highest > lowest and values.numel() >= 2 and bool(torch.all(values == highest)):
            outcomes.append(GroupOutcome.ALL_MAX)
        elif highest > lowest and values.numel() >= 2 and bool(torch.all(values == lowest)):
            outcomes.append(GroupOutcome.ALL_MIN)
        else:
            outcomes.append(GroupOutcome.OTHER)
    return outcomes


def group_upper_counts(
    rewards: torch.Tensor, num_generations: int, lowest: float, highest: float
) -> tuple[list[int], list[int]]:
    """Per group: scorable members in the upper half of the reward range ``(lowest + highest) / 2``, and scorable.

    For 0/1 rewards the first count is the number of right answers. The upper count is ``-1`` (unknown) while the
    range has not opened (``lowest >= highest``). The prompt history tallies these to predict retention per prompt.

    Example:
        >>> group_upper_counts(torch.tensor([1.0, 0.0, 1.0, float("nan"), 0.0, 0.0]), 3, lowest=0.0, highest=1.0)
        ([2, 0], [3, 2])
    """
    grouped = rewards.view(-1, num_generations)
    scored = ~torch.isnan(grouped)
    scorable = scored.sum(dim=1).tolist()
    if not highest > lowest:
        return [-1] * len(scorable), scorable
    upper = (scored & (grouped > (lowest + highest) / 2)).sum(dim=1).tolist()
    return upper, scorable


def zero_variance_split(
    rewards: torch.Tensor, num_generations: int, informative: torch.Tensor, lowest: float, highest: float
) -> ZeroVarianceSplit:
    """Split the uninformative groups by where their common reward sits.

    ``lowest`` / ``highest`` are the reward range seen so far (for 0/1 verifier rewards: 0 and 1). A group whose
    scorable rewards all equal ``highest`` counts as *all_max* (e.g. every sibling right), all equal to ``lowest`` as
    *all_min* (every sibling wrong); anything else (a middle value, fewer than two scorable members, or a range that
    has not opened yet, ``lowest == highest``) counts as *other*.

    Example:
        >>> r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5])
        >>> zero_variance_split(r, 2, informative_groups(r, 2), lowest=0.0, highest=1.0)
        ZeroVarianceSplit(all_max=1, all_min=1, other=1)
    """
    outcomes = group_outcomes(rewards, num_generations, informative, lowest, highest)
    return ZeroVarianceSplit(
        all_max=outcomes.count(GroupOutcome.ALL_MAX),
        all_min=outcomes.count(GroupOutcome.ALL_MIN),
        other=outcomes.count(GroupOutcome.OTHER),
    )


def fill_priority(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Order in which uninformative groups fill a batch when the budget runs out: largest spread, then most scorable.

    Filled groups are masked out of the loss, so the order only decides which ones are logged; preferring the
    groups closest to informative keeps the logged batch representative.
    """
    spread, scorable = group_reward_spread(rewards, num_generations)
    # Sort by spread, then by scorable count (stable sort on the secondary key first).
    by_scorable = torch.argsort(scorable, descending=True, stable=True)
    return by_scorable[torch.argsort(spread[by_scorable], descending=True, stable=True)]


def plan_refill_groups(
    missing_groups: int, attempted_groups: int, informative_groups_seen: int, max_groups: int
) -> int:
    """How many prompt groups (per process) the next refill round should generate.

    Asks for ``missing / observed retention`` groups so that one more round usually suffices, at least 1 and at most
    ``max_groups`` (the size of the first round). Before any informative group was seen, asks for ``max_groups``.
    Every process must get the same answer, so call it with globally agreed counts.

    Example:
        >>> plan_refill_groups(missing_groups=3, attempted_groups=8, informative_groups_seen=4, max_groups=8)
        6
    """
    if missing_groups <= 0:
        return 0
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    if attempted_groups <= 0 or informative_groups_seen <= 0:
        return max_groups
    retention = informative_groups_seen / attempted_groups
    return max(1, min(max_groups, math.ceil(missing_groups / retention)))
