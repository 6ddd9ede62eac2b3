"""DAPO dynamic sampling as plain tensor functions: which groups are informative, and how many to ask for next.

A group of ``G`` completions of one prompt is *informative* when its task reward varies: the population standard
deviation of the reward over its scorable (non-NaN) members exceeds a tolerance. A group whose rewards are all equal
(all right, all wrong) has advantage 0 under any group baseline and only wastes its share of the update batch
(DAPO Sec. 3.2, Eq. 11: keep groups with ``0 < |{correct}| < G``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch


class GroupOutcome(IntEnum):
    """What one group of a prompt turned out to be (an int, so that the trainer can gather it as a tensor)."""

    INFORMATIVE = 0
    ALL_MAX = 1  # every sibling at the highest filter reward (e.g. all right)
    ALL_MIN = 2  # every sibling at the lowest filter reward (e.g. all wrong)
    OTHER = 3  # zero-variance elsewhere (a middle value, too few scorable members, reward range not open yet)


# Codes of :func:`success_outcomes` (the diagnostics' split by a success threshold); the same ints as GroupOutcome's.
MIXED, ALL_MAX, ALL_MIN, UNSCORABLE = 0, 1, 2, 3


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
    # DAPO (Yu et al. 2025) Sec. 3.2, Eq. 11: keep groups with 0 < C < G, i.e. with nonzero reward contrast.
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


def success_outcomes(
    rewards: torch.Tensor, num_generations: int, success_threshold: float = 1.0, tol: float = 1e-6
) -> torch.Tensor:
    """Classify each group by its task rewards against a success threshold: ``MIXED``, ``ALL_MAX``, ``ALL_MIN`` or
    ``UNSCORABLE`` (the ``groups/`` diagnostics' split).

    Unlike :func:`group_outcomes` (dynamic sampling's split, which compares a group with the range of rewards seen so
    far), this split needs no history: a group is placed by the success threshold alone, so the diagnostics of a
    step do not depend on earlier steps.

    A group has *no contrast* when the spread of its scorable rewards is ``<= tol`` (one scorable member has none).
    Such a group gives every sibling the same advantage, so it teaches nothing; it is

    * ``ALL_MAX`` (all correct) when its common reward is ``>= success_threshold``,
    * ``ALL_MIN`` (all wrong) otherwise, e.g. a constant 0.5 under the default threshold 1.0: the group is saturated
      *below* success, which is the case the prompt curriculum must fix (too hard), not the easy-prompt case.

    Every group with contrast is ``MIXED``; a group without any scorable member is ``UNSCORABLE``. For 0/1 rewards
    this is exactly all-correct / all-wrong / mixed, and ``MIXED`` is what dynamic sampling keeps.

    Example:
        >>> success_outcomes(torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5, float("nan"), float("nan")]), 2)
        tensor([1, 2, 0, 2, 3])
    """
    grouped = grouped_rewards(rewards, num_generations)
    # Spread as max - min over scorable members: exact 0 for constant groups, no rounding from a mean.
    low, high = scorable_extremes(grouped)
    has_any = (~torch.isnan(grouped)).any(dim=1)
    no_contrast = has_any & (high - low <= tol)

    outcome = torch.full((grouped.shape[0],), MIXED, dtype=torch.long)
    outcome[no_contrast & (low >= success_threshold)] = ALL_MAX
    outcome[no_contrast & (low < success_threshold)] = ALL_MIN
    outcome[~has_any] = UNSCORABLE
    return outcome


def grouped_rewards(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``rewards`` as a detached CPU ``(B, G)`` view, after checking it is a flat float tensor of whole groups."""
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}")
    if rewards.dim() != 1 or not torch.is_floating_point(rewards):
        raise ValueError(f"rewards must be a flat float (B*G,) tensor, got {rewards.dtype} {tuple(rewards.shape)}")
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of num_generations={num_generations}")
    return rewards.detach().cpu().view(-1, num_generations)


def scorable_extremes(grouped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of a ``(B, G)`` reward tensor: the lowest and highest scorable (non-NaN) reward; ``(inf, -inf)`` for a
    row without any, so ``highest > lowest`` holds exactly for the rows with contrast.

    Example:
        >>> scorable_extremes(torch.tensor([[0.0, 1.0], [0.5, float("nan")]]))
        (tensor([0.0000, 0.5000]), tensor([1.0000, 0.5000]))
    """
    missing = torch.isnan(grouped)
    lowest = torch.where(missing, torch.inf, grouped).amin(dim=1)
    highest = torch.where(missing, -torch.inf, grouped).amax(dim=1)
    return lowest, highest
