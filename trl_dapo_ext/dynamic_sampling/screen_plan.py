"""Round sizes of screening (``dynamic_sampling_screen_generations=k``): probes first, completions after.

With screening, a round generates rows in *units* of ``k`` completions of one prompt: a new prompt's probes are one
unit, and completing a prompt whose probes were mixed takes ``G / k - 1`` more units in the next round (the same
step, the same policy). Every process must generate the same number of rows per round (TRL's collectives), so each
process's completions come first and the rest of the round is new probes; a process with fewer completions screens
more. Everything here is counted per process, from gathered values: every process computes the same sizes.

A probe round is only worth generating when a later round can complete its mixed prompts, and under a budget (in
completions per process per step) every new probe reserves the completion it may need, so that a mixed prompt is
never left incomplete for want of budget.

Example (G=8, k=4: one unit per probe, one more to complete):
    >>> screening_round(missing=[3, 1], pending=[1, 1], units_to_complete=1, mixed_rate=0.5, may_screen=True)  # 3 / 0.5 = 6 probes; both alike
    [6, 6]
    >>> screening_round(missing=[3, 1], pending=[1, 1], units_to_complete=1, mixed_rate=0.5, may_screen=False)
    [0, 0]
    >>> screening_round(missing=[3, 1], pending=[2, 0], units_to_complete=1, mixed_rate=0.5, may_screen=True,
    ...                 budget_units=6)  # 2 completions + 1 probe (reserving 2 units), or 3 probes (reserving 6)
    [1, 3]
"""

from __future__ import annotations

import math

MIN_MIXED_RATE = 0.05  # an estimate below this still sizes a finite round (it is updated from every round)


def wanted_probes(missing: float, mixed_rate: float) -> int:
    """New prompts to screen for ``missing`` informative groups when a share ``mixed_rate`` of probes is mixed.

    Example:
        >>> wanted_probes(3, 0.5), wanted_probes(0, 0.5), wanted_probes(2, 0.0)
        (6, 0, 40)
    """
    if missing <= 0:
        return 0
    return math.ceil(missing / max(mixed_rate, MIN_MIXED_RATE))


def probes_to_fill(groups: int, mixed_rate: float, chance: float, max_probes: int) -> int:
    """New prompts to screen so that at least ``groups`` of them are mixed with probability ``chance``, each being
    mixed with probability ``mixed_rate`` independently (the binomial quantile), at most ``max_probes``.

    Pipelined screening with refill sizes a step's probes for the next step this way: a next step short of mixed
    prompts needs another generation call, so its chance of needing one is about ``1 - chance``.

    Example:
        >>> probes_to_fill(2, 0.5, 0.9, max_probes=100), wanted_probes(2, 0.5)  # 7 probes: 94% chance of >= 2 mixed
        (7, 4)
        >>> probes_to_fill(16, 0.5, 0.9, max_probes=100), probes_to_fill(16, 0.5, 0.9, max_probes=20)
        (39, 20)
    """
    if groups <= 0:
        return 0
    rate = max(mixed_rate, MIN_MIXED_RATE)
    probes = wanted_probes(groups, rate)
    while probes < max_probes and _at_least(groups, probes, rate) < chance:
        probes += 1
    return min(probes, max_probes)


def _at_least(successes: int, trials: int, rate: float) -> float:
    """P(Binomial(trials, rate) >= successes)."""
    below = sum(math.comb(trials, i) * rate**i * (1 - rate) ** (trials - i) for i in range(successes))
    return 1.0 - below


def screening_round(
    *,
    missing: list[float],
    pending: list[int],
    units_to_complete: int,
    mixed_rate: float,
    may_screen: bool,
    budget_units: int | None = None,
    max_probes: int | None = None,
) -> list[int]:
    """New probes per process in the next round, whose first rows complete each process's ``pending`` prompts.

    ``missing``: per process, informative groups still missing once the pending completions are counted;
    ``units_to_complete``: ``G / k - 1``; ``may_screen``: a round after the next one is allowed (else no new probes);
    ``budget_units``: what the step may still generate per process, in units of ``k`` (None: no budget);
    ``max_probes``: at most this many new probes per process wanted in one round. Returns ``n`` with
    ``pending[p] * units_to_complete + n[p]`` the same for every process: the round's units.
    """
    completion_units = [count * units_to_complete for count in pending]
    wanted = [wanted_probes(count, mixed_rate) if may_screen else 0 for count in missing]
    if max_probes is not None:
        wanted = [min(count, max_probes) for count in wanted]
    units = max((done + count for done, count in zip(completion_units, wanted)), default=0)
    if budget_units is not None and may_screen:
        # Each new probe reserves itself and the completion it may need, on every process: the round can be no
        # larger than the smallest process's completions plus the probes it can still pay for.
        affordable = [done + max(budget_units - done, 0) // (1 + units_to_complete) for done in completion_units]
        units = min(units, min(affordable))
    units = max(units, max(completion_units, default=0))  # pending completions are always generated
    return [units - done for done in completion_units]
