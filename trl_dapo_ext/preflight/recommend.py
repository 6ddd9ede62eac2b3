"""Which group-selection mode to switch on for a dataset, from its measured pass rates at the group size G.

`trl-dapo profile` measures each prompt's pass rate; from them this module computes the expected completions per
informative group (a group whose rewards differ, the only kind that carries a gradient) of each mode, with the
simulator's model (`benchmarks/rollout_efficiency.py`, binary rewards, prompts drawn from the measured pass rates,
no prompt history):

* **plain GRPO** (dynamic sampling off), and DAPO's **refill**, which generates full groups as GRPO does and only
  drops the zero-variance ones afterwards: ``G / r``, with ``r`` the share of prompts whose group of G is mixed;
* **screening** (``dynamic_sampling_screen_generations=k``): ``k`` probes first, a full group only for the prompts
  that can teach; the least cost any k-probe rule reaches (`dynamic_sampling.screening.probe_rule_bound`), for each
  ``k`` that divides ``G``.

The recommendation is screening at GRPO's budget (``dynamic_sampling_fixed_budget=True``: GRPO's completions and
optimizer steps, more informative groups per step) when it saves at least `MIN_SAVING` of GRPO's completions per
informative group, plain GRPO otherwise. Refill is never the recommendation for a generation budget: at an equal
number of completions it trains on the same informative groups as GRPO in fewer, larger steps (docs/ablation.md).

Example (half the prompts always solved, half at pass rate 1/2; G = 8):
    >>> choice = recommend_mode([1.0] * 50 + [0.5] * 50, group_size=8)
    >>> choice.mode, choice.config["dynamic_sampling_screen_generations"]
    ('screening at GRPO budget', 2)
    >>> round(choice.costs["grpo"], 1), round(choice.costs["screening k=2"], 1)
    (16.1, 11.4)

    GRPO: a group is mixed with chance 0.5 x (1 - 2 / 2^8) = 0.496, 8 / 0.496 completions each. Screening with 2
    probes, completing the mixed prompts and those whose 2 probes both failed (only pass rate 1/2 prompts: 1/8 of
    all): 2 + 6 x (1/4 + 1/8) = 4.25 completions per prompt for 0.373 informative groups, 11.4 each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trl_dapo_ext.dynamic_sampling.screening import mixed_chance, probe_rule_bound

# Screening is recommended when it saves at least this share of GRPO's completions per informative group: below it
# the saving is within what one run's noise and the extra generation round per step cost.
MIN_SAVING = 0.15


@dataclass(frozen=True)
class Recommendation:
    """The mode to use, the config fields that set it, why, and each mode's expected completions per informative
    group (``math.inf`` when no prompt can give one)."""

    mode: str
    config: dict[str, Any]
    reason: str
    costs: dict[str, float] = field(default_factory=dict)
    zero_variance_share: float = 0.0


def recommend_mode(pass_rates: Sequence[float], group_size: int, binary: bool = True) -> Recommendation:
    """The selection mode for prompts with these pass rates at group size ``group_size`` (see the module docstring).

    ``binary``: whether the reward is right/wrong; the screening model assumes it, so a graded reward gets plain
    GRPO with a note.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group of 1 never has contrast), got {group_size}")
    p = np.clip(np.asarray(pass_rates, dtype=float), 0.0, 1.0)
    if p.size == 0:
        raise ValueError("no pass rates: profile at least one prompt")
    retention = float(np.mean(mixed_chance(p, group_size)))
    zero_variance = 1.0 - retention
    grpo = group_size / retention if retention > 0 else math.inf
    costs = {"grpo": grpo, "refill": grpo}
    for k in (k for k in range(2, group_size) if group_size % k == 0 and k <= 4):
        costs[f"screening k={k}"] = probe_rule_bound(p, k, group_size)[0] if retention > 0 else math.inf
    off = {"dynamic_sampling": False}
    if retention <= 0:
        return Recommendation(
            "no mode can help",
            off,
            f"no prompt gives a mixed group at G = {group_size} (every group is all right or all wrong): no method "
            "learns from these prompts; keep prompts the model sometimes solves (`trl-dapo profile --keep-band 0.01 "
            "0.99`) or start from a stronger model",
            costs,
            zero_variance,
        )
    if not binary:
        return Recommendation(
            "plain GRPO",
            off,
            "the reward is graded: the screening model assumes right/wrong rewards; measure "
            "`dynamic_sampling/completions_per_informative_group` in a short screening run before switching it on",
            costs,
            zero_variance,
        )
    screens = {name: cost for name, cost in costs.items() if name.startswith("screening")}
    best = min(screens, key=lambda name: (screens[name], name)) if screens else None
    saving = 1.0 - screens[best] / grpo if best else 0.0
    if best is None or saving < MIN_SAVING:
        return Recommendation(
            "plain GRPO",
            off,
            f"{zero_variance:.0%} of groups at G = {group_size} are zero-variance: screening would save "
            f"{max(saving, 0.0):.0%} of GRPO's {grpo:.1f} completions per informative group, below "
            f"{MIN_SAVING:.0%}; leave dynamic sampling off",
            costs,
            zero_variance,
        )
    k = int(best.split("=")[1])
    config = {
        "dynamic_sampling": True,
        "dynamic_sampling_screen_generations": k,
        "dynamic_sampling_fixed_budget": True,
    }
    return Recommendation(
        "screening at GRPO budget",
        config,
        f"{zero_variance:.0%} of groups at G = {group_size} are zero-variance: screening with k = {k} probes costs "
        f"about {screens[best]:.1f} completions per informative group against GRPO's {grpo:.1f} ({saving:.0%} less; "
        "prompt history lowers it further over epochs). At GRPO's budget it keeps GRPO's completions and optimizer "
        "steps and trains on more informative groups per step",
        costs,
        zero_variance,
    )
