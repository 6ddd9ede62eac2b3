"""The fill-chance rule for refill rounds (``confidence`` set): the smallest round likely enough to fill the batch.

A round's chance to fill the batch is the product over processes of each one's chance to reach the groups it still
needs, each a sum of one Beta-Binomial per stratum (:func:`.retention.at_least_probability`). The chance grows with
the round (more groups can only add informative ones), so a bisection finds the smallest round that reaches the
wanted chance. :class:`.planner.RefillPlanner` supplies the posteriors and the strata; the cost rule is in
:mod:`.cost_search`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from .retention import at_least_probability


def fill_chance(
    needed: Sequence[int],
    own: Sequence[Sequence[str]],
    peeked: Sequence[str],
    refill: int,
    posteriors: dict[str, tuple[float, float]],
) -> float:
    """Chance that every process reaches its ``needed`` groups when each adds ``refill`` refill groups.

    ``needed`` and ``own`` (the strata of each process's own groups) hold one entry per process; process ``p`` draws
    the ``p``-th contiguous share of ``refill`` groups from ``peeked`` (the strata of the refill stream's next
    prompts); ``posteriors``: the Beta posterior of every stratum named.

    Example (one process missing 1 group, one refill group at a uniform rate):
        >>> fill_chance([1], [[]], ["a"], 1, {"a": (1.0, 1.0)})
        0.5
    """
    shares = [peeked[p * refill : (p + 1) * refill] for p in range(len(needed))]
    chance = 1.0
    for p in range(len(needed)):
        if needed[p] > 0:
            counts = Counter(own[p]) + Counter(shares[p])
            chance *= at_least_probability(needed[p], [(n, *posteriors[s]) for s, n in counts.items()])
    return chance


def smallest_refill(chance: Callable[[int], float], upper: int, wanted: float) -> int:
    """Smallest refill count in ``[0, upper]`` whose ``chance`` (non-decreasing in the count) reaches ``wanted``.

    Returns ``upper`` when even that falls short.

    Example:
        >>> smallest_refill(lambda n: n / 10, upper=10, wanted=0.35), smallest_refill(lambda n: 0.0, 10, 0.5)
        (4, 10)
    """
    if chance(0) >= wanted:
        return 0
    if chance(upper) < wanted:
        return upper
    low, high = 0, upper  # chance(low) < wanted <= chance(high)
    while high - low > 1:
        middle = (low + high) // 2
        if chance(middle) >= wanted:
            high = middle
        else:
            low = middle
    return high
