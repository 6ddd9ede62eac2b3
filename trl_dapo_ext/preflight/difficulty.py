"""How hard a dataset is for the current model: pass rates per prompt, zero-variance shares at a group size G,
the expected retention of dynamic sampling and what the refill planner would spend per retained group.

A group of G completions of a prompt with pass rate ``p`` (binary reward) is zero-variance, and teaches nothing,
with probability ``p^G + (1 - p)^G``; it is mixed (retained by dynamic sampling) with ``1 - p^G - (1 - p)^G``.
From ``K >= G`` samples with ``c`` successes, :func:`zero_variance_probability` estimates ``p^G + (1-p)^G``
without bias (``C(c, G) / C(K, G)`` is the chance that G of the K samples drawn without replacement all passed);
with ``K = G`` it is 1 exactly when the sampled group itself was zero-variance, which is what TRL's
``frac_reward_zero_std`` counts. For graded rewards the share is measured: the K samples are cut into groups of G.

Pure Python (the planner uses numpy); the generation and scoring glue is ``trl_dapo_ext/cli/profile/``.

Example:
    >>> stats = [prompt_stats(i, rewards, [5] * 4, [False] * 4, group_size=4) for i, rewards in
    ...          enumerate([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]])]
    >>> summary = summarize(stats, group_size=4)
    >>> summary["zero_variance_share"], summary["expected_retention"]
    (0.6667, 0.3333)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.dynamic_sampling.profile_table import PromptStats, read_table, seed_history, write_table
from trl_dapo_ext.preflight.recommend import recommend_mode

__all__ = [
    "PromptStats",
    "histogram",
    "in_band",
    "planner_cost",
    "prompt_stats",
    "read_table",
    "seed_history",
    "summarize",
    "write_table",
    "zero_variance_probability",
]

HISTOGRAM_EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def zero_variance_probability(successes: int, samples: int, group_size: int) -> float:
    """Unbiased estimate of ``p^G + (1 - p)^G`` from ``successes`` of ``samples >= G`` binary draws.

    >>> zero_variance_probability(4, 4, 4), zero_variance_probability(2, 4, 4), zero_variance_probability(8, 16, 2)
    (1.0, 0.0, 0.4667)
    """
    if group_size < 1 or samples < group_size or not 0 <= successes <= samples:
        raise ValueError(f"need 1 <= G <= samples and 0 <= successes <= samples, got {group_size=}, {samples=}")
    total = math.comb(samples, group_size)
    value = (math.comb(successes, group_size) + math.comb(samples - successes, group_size)) / total
    return round(value, 4)


def prompt_stats(
    index: int,
    rewards: Sequence[float | None],
    lengths: Sequence[int],
    truncated: Sequence[bool],
    group_size: int,
    pass_threshold: float = 1.0,
) -> PromptStats:
    """The statistics of one prompt from its K >= G sampled completions (None rewards: not scorable, skipped).

    >>> prompt_stats(0, [1.0, 0.0, 1.0, 1.0], [3, 5, 4, 4], [False, True, False, False], group_size=2)
    PromptStats(index=0, samples=4, passed=3, pass_rate=0.75, mean_reward=0.75, reward_std=0.433, zero_variance=0.5, mean_length=4.0, truncated=0.25, binary=True)
    """
    if not len(rewards) == len(lengths) == len(truncated):
        raise ValueError("rewards, lengths and truncated need one entry per completion")
    scored = [float(r) for r in rewards if r is not None and not math.isnan(r)]
    binary = all(r in (0.0, 1.0) for r in scored)
    passed = sum(r >= pass_threshold for r in scored)
    if len(scored) < group_size:
        zero = 1.0  # too few scorable completions for one group: TRL would see no contrast either
    elif binary:
        zero = zero_variance_probability(int(sum(scored)), len(scored), group_size)
    else:
        groups = [scored[k : k + group_size] for k in range(0, len(scored) - group_size + 1, group_size)]
        zero = round(sum(max(g) - min(g) < 1e-6 for g in groups) / len(groups), 4)
    return PromptStats(
        index=int(index),
        samples=len(rewards),
        passed=int(passed),
        pass_rate=round(passed / len(scored), 4) if scored else 0.0,
        mean_reward=round(statistics.fmean(scored), 4) if scored else None,
        reward_std=round(statistics.pstdev(scored), 4) if scored else None,
        zero_variance=zero,
        mean_length=round(statistics.fmean(lengths), 3) if lengths else 0.0,
        truncated=round(sum(truncated) / len(truncated), 4) if truncated else 0.0,
        binary=binary,
    )


def histogram(pass_rates: Sequence[float]) -> dict[str, int]:
    """Prompts per pass-rate bin: exactly 0, exactly 1, and ten bins in between.

    >>> histogram([0.0, 0.05, 0.5, 1.0, 1.0])["1"], histogram([0.0, 0.05, 0.5, 1.0])["(0, 0.1)"]
    (2, 1)
    """
    bins = {"0": 0}
    labels = []
    for low, high in zip(HISTOGRAM_EDGES[:-1], HISTOGRAM_EDGES[1:]):
        label = f"({low:g}, {high:g})" if low == 0 else f"[{low:g}, {high:g})"
        labels.append((low, high, label))
        bins[label] = 0
    bins["1"] = 0
    for rate in pass_rates:
        if rate <= 0:
            bins["0"] += 1
        elif rate >= 1:
            bins["1"] += 1
        else:
            bins[next(label for low, high, label in labels if low <= rate < high)] += 1
    return bins


def planner_cost(retention: float, prompts: int, group_size: int, batch_groups: int) -> dict[str, float]:
    """What the refill planner (``dynamic_sampling.planner``) makes of this retention after one step's evidence.

    ``prompts`` groups observed at ``retention``: its posterior retention, the expected completions per retained
    group (``G / retention``) and the groups it plans for round 1 of a step that needs ``batch_groups``.

    >>> cost = planner_cost(0.5, prompts=64, group_size=8, batch_groups=8)
    >>> cost["planner_retention"], cost["completions_per_retained_group"]
    (0.5, 16.0)
    """
    planner = RefillPlanner(decay=1.0, generations=group_size)
    informative = round(retention * prompts)
    planner.observe(attempted=prompts, informative=informative)
    planner.end_step()
    estimate = planner.expected_retention()
    first_round = batch_groups + planner.first_round(batch_groups)
    return {
        "planner_retention": round(estimate, 4),
        "completions_per_retained_group": round(group_size / estimate, 2) if estimate > 0 else math.inf,
        "planner_first_round_groups": first_round,
        "planner_first_round_completions": first_round * group_size,
    }


def summarize(stats: Sequence[PromptStats], group_size: int, batch_groups: int = 8) -> dict[str, Any]:
    """The profile's summary: pass-rate histogram, zero-variance share at G, retention, planner cost, lengths."""
    if not stats:
        raise ValueError("no prompts profiled")
    zero = statistics.fmean(s.zero_variance for s in stats)
    retention = 1.0 - zero
    rewards = [s.mean_reward for s in stats if s.mean_reward is not None]
    completions = sum(s.samples for s in stats)
    summary: dict[str, Any] = {
        "prompts": len(stats),
        "group_size": group_size,
        "samples_per_prompt": stats[0].samples,
        "binary_reward": all(s.binary for s in stats),
        "mean_pass_rate": round(statistics.fmean(s.pass_rate for s in stats), 4),
        "mean_reward": round(statistics.fmean(rewards), 4) if rewards else None,
        "pass_rate_histogram": histogram([s.pass_rate for s in stats]),
        "zero_variance_share": round(zero, 4),
        "expected_retention": round(retention, 4),
        "mean_completion_length": round(sum(s.mean_length * s.samples for s in stats) / completions, 3),
        "truncated_share": round(sum(s.truncated * s.samples for s in stats) / completions, 4),
    }
    summary.update(planner_cost(retention, len(stats), group_size, batch_groups))
    successes, scored = _counts(stats)
    choice = recommend_mode(successes, scored, group_size, binary=summary["binary_reward"])
    summary["recommendation"] = {
        "mode": choice.mode,
        "config": choice.config,
        "reason": choice.reason,
        "completions_per_informative_group": {
            name: round(cost, 2) if math.isfinite(cost) else None for name, cost in choice.costs.items()
        },
        "saving": round(choice.saving, 4) if choice.saving is not None else None,
        "intervals_95": {name: [round(v, 4) for v in bounds] for name, bounds in choice.intervals.items()},
        "threshold": choice.note,
    }
    return summary


def _counts(stats: Sequence[PromptStats]) -> tuple[list[int], list[int]]:
    """Per prompt, its passes and its scorable samples (``passed / pass_rate``; all its samples when none passed,
    which gives the same estimates: a prompt never seen to pass reads as never solved)."""
    scored = [round(s.passed / s.pass_rate) if s.pass_rate > 0 else s.samples for s in stats]
    return [s.passed for s in stats], scored


def in_band(stats: Sequence[PromptStats], low: float, high: float) -> list[int]:
    """Dataset indices whose pass rate lies in ``[low, high]`` (e.g. ``0.01 0.99``: neither never nor always).

    >>> in_band([prompt_stats(i, r, [1, 1], [False, False], 2) for i, r in enumerate([[0, 0], [1, 0], [1, 1]])],
    ...         0.01, 0.99)
    [1]
    """
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"the pass-rate band needs 0 <= low <= high <= 1, got {low}, {high}")
    return [s.index for s in stats if low <= s.pass_rate <= high]
