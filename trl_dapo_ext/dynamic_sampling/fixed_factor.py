"""The fixed-factor rule for refill rounds: a first round of a fixed multiple of the batch, then ``missing / retention``.

Used when ``dynamic_sampling_oversample`` is a number (DAPO's recipe: 3). Plain arithmetic on counts every process
agrees on, so every process computes the same sizes. The adaptive rules are :class:`.planner.RefillPlanner`'s.
"""

from __future__ import annotations

import math


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
