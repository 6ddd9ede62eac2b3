"""What the dashboard shows: the panels (which metrics, which axes) and the summary table's rows, chosen per run.

Every metric name goes through `trl_dapo_ext.metric_names.declared`: a name that is not declared there fails at
import instead of silently dropping out of the report.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from trl_dapo_ext.metric_names import declared

from .load import REWARD_BAND

PER_REWARD = re.compile(r"rewards/.+/mean")  # TRL's mean of each reward function


@dataclass(frozen=True)
class Series:
    """One metric in a panel: log key, legend label, and which y axis (right for a different unit)."""

    key: str
    label: str
    right: bool = False

    def __post_init__(self) -> None:
        if not PER_REWARD.fullmatch(self.key):  # one line per reward function, named by the run (`panels_for`)
            declared(self.key)


@dataclass(frozen=True)
class Panel:
    """A dashboard panel: lines, an optional stacked area, an optional min-max band (key pair)."""

    title: str
    lines: tuple[Series, ...] = ()
    stacked: tuple[Series, ...] = ()
    band: tuple[str, str] | None = None
    ylabel: str = ""
    right_ylabel: str = ""
    ylim: tuple[float, float] | None = None  # fixed range for fractions, so 0.0 and 1.0 read as what they are
    right_ylim: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.band is not None and self.band != REWARD_BAND:
            for key in self.band:
                declared(key)

    def keys(self) -> list[str]:
        return [s.key for s in (*self.stacked, *self.lines)]


# `rewards/<name>/mean` series are added per run (see `panels_for`).
PANELS: tuple[Panel, ...] = (
    Panel(
        "Reward and accuracy",
        lines=(
            Series("reward", "reward (weighted sum)"),
            Series("length/task_accuracy", "task accuracy (before shaping)"),
            Series("length/shaped_reward_mean", "shaped reward (after shaping)"),
            Series("groups/pass@1", "pass@1"),
            Series("groups/pass@k", "pass@k"),
        ),
        band=REWARD_BAND,
    ),
    Panel(
        "Zero-variance split",
        stacked=(
            Series("groups/frac_mixed", "mixed (has contrast)"),
            Series("groups/frac_all_max", "all correct (>= success threshold)"),
            Series("groups/frac_all_min", "all wrong"),
        ),
        lines=(Series("frac_reward_zero_std", "TRL frac_reward_zero_std"),),
        ylabel="fraction of groups",
        ylim=(-0.02, 1.02),
    ),
    Panel(
        "Within-group reward std",
        lines=(Series("groups/reward_std_mean", "mean"), Series("groups/reward_std_p50", "median")),
        band=("groups/reward_std_p10", "groups/reward_std_p90"),
    ),
    Panel(
        "Dynamic sampling: retention and generation calls",
        lines=(
            Series("dynamic_sampling/retention_rate", "retention rate"),
            Series("dynamic_sampling/rounds", "generation calls per step (GRPO: 1)", right=True),
        ),
        ylabel="retained / attempted groups",
        right_ylabel="generation calls",
        ylim=(-0.02, 1.02),
    ),
    Panel(
        "Dynamic sampling: groups per step",
        lines=(
            Series("dynamic_sampling/attempted_groups", "attempted"),
            Series("dynamic_sampling/retained_groups", "retained"),
            Series("dynamic_sampling/filled_groups", "filled"),
            Series("dynamic_sampling/discarded_surplus_groups", "surplus discarded"),
            # Zero-variance groups by where their reward sits in the range seen so far (all three add up).
            Series("dynamic_sampling/all_max_groups", "all at the top reward"),
            Series("dynamic_sampling/all_min_groups", "all at the bottom reward"),
            Series("dynamic_sampling/other_zero_variance_groups", "other zero-variance"),
            Series("dynamic_sampling/generated_completions", "completions generated", right=True),
        ),
        ylabel="groups",
        right_ylabel="completions",
    ),
    Panel(
        "Dynamic sampling: screening funnel",
        lines=(
            Series("dynamic_sampling/screened_prompts", "prompts screened"),
            Series("dynamic_sampling/completed_prompts", "completed to a group"),
            Series("dynamic_sampling/dropped_prompts", "dropped after their probes"),
            Series(
                "dynamic_sampling/completions_per_informative_group", "completions per informative group", right=True
            ),
        ),
        ylabel="prompts",
        right_ylabel="completions",
    ),
    Panel(
        "Lengths and truncation",
        lines=(
            Series("completions/mean_length", "mean length"),
            Series("completions/clipped_ratio", "truncated (TRL)", right=True),
            Series("length/truncated_frac", "truncated", right=True),
            Series("length/in_buffer_frac", "in overlong buffer", right=True),
            Series("length/overlong_penalty_mean", "mean overlong penalty", right=True),
        ),
        band=("completions/min_length", "completions/max_length"),
        ylabel="tokens",
        right_ylabel="fraction / penalty",
        right_ylim=(-1.05, 1.05),
    ),
    Panel(
        "Time split",
        stacked=(
            Series("time/generation_s", "generation"),
            Series("time/reward_s", "reward"),
            Series("time/scoring_s", "scoring (log-probs, batch assembly)"),
            Series("time/update_s", "update"),
            Series("time/other_s", "other"),
        ),
        lines=(Series("step_time", "TRL step_time"),),
        ylabel="seconds per step",
    ),
    Panel(
        "Token cost",
        lines=(
            Series("cost/generated_tokens_per_retained_group", "generated tokens / retained group"),
            Series("cost/useful_token_frac", "useful (loss) positions", right=True),
            Series("cost/padded_token_frac", "padded positions", right=True),
        ),
        ylabel="tokens",
        right_ylabel="fraction of update batch",
        right_ylim=(-0.02, 1.02),
    ),
    Panel("Peak accelerator memory", lines=(Series("cost/peak_memory_gb", "peak allocated"),), ylabel="GiB"),
    Panel(
        "Clip ratios and entropy",
        lines=(
            Series("clip_ratio/low_mean", "clipped low"),
            Series("clip_ratio/high_mean", "clipped high"),
            Series("clip_ratio/region_mean", "clipped (any)"),
            Series("entropy", "entropy", right=True),
        ),
        ylabel="fraction of tokens",
        right_ylabel="entropy (nats)",
    ),
    Panel("KL to the reference", lines=(Series("kl", "kl"),)),
    Panel(
        "Loss and gradient norm",
        lines=(Series("loss", "loss"), Series("grad_norm", "grad norm", right=True)),
        right_ylabel="grad norm",
    ),
)
COMPLETIONS_PANEL = "Logged completions: length vs reward"

# Summary table rows, in order; only the keys the run logged are printed.
SUMMARY_KEYS: tuple[str, ...] = tuple(
    map(
        declared,
        (
            "reward",
            "length/task_accuracy",
            "length/shaped_reward_mean",
            "groups/pass@1",
            "groups/pass@k",
            "frac_reward_zero_std",
            "groups/frac_mixed",
            "groups/frac_all_max",
            "groups/frac_all_min",
            "groups/reward_std_mean",
            "dynamic_sampling/retention_rate",
            "dynamic_sampling/rounds",
            "completions/mean_length",
            "completions/clipped_ratio",
            "length/truncated_frac",
            "length/in_buffer_frac",
            "length/overlong_penalty_mean",
            "cost/generated_tokens_per_retained_group",
            "cost/useful_token_frac",
            "cost/padded_token_frac",
            "cost/peak_memory_gb",
            "step_time",
            "time/generation_frac",
            "time/reward_frac",
            "time/scoring_frac",
            "time/update_frac",
            "time/other_frac",
            "clip_ratio/region_mean",
            "entropy",
            "kl",
            "loss",
            "grad_norm",
        ),
    )
)


def panels_for(history: list[dict[str, float]]) -> list[Panel]:
    """PANELS with one line per reward function (``rewards/<name>/mean``) added to the reward panel."""
    reward_keys = sorted({key for entry in history for key in entry if PER_REWARD.fullmatch(key)})
    extra = tuple(Series(key, key.split("/", 1)[1].rsplit("/", 1)[0]) for key in reward_keys)
    panels = []
    for panel in PANELS:
        if panel.title == "Reward and accuracy":
            panel = replace(panel, lines=panel.lines + extra)
        panels.append(panel)
    return panels


def has_data(history: list[dict[str, float]], panel: Panel) -> bool:
    return any(math.isfinite(entry.get(key, math.nan)) for entry in history for key in panel.keys())


def completion_points(completions, history) -> dict[str, list[float]] | None:
    """Completion length (characters) and the unweighted sum of the reward columns, per logged completion."""
    if "completion" not in completions.columns:
        return None
    reward_names = {
        key.split("/", 1)[1].rsplit("/", 1)[0] for entry in history for key in entry if key.startswith("rewards/")
    }
    reward_columns = [c for c in completions.columns if c in reward_names]
    if not reward_columns:  # a run whose log keys we cannot match: every numeric column but step and advantage
        numeric = completions.select_dtypes("number").columns
        reward_columns = [c for c in numeric if c not in ("step", "advantage")]
    if not reward_columns:
        return None
    rewards = completions[reward_columns].sum(axis=1, min_count=1)
    lengths = completions["completion"].map(_text_length)
    steps = completions["step"] if "step" in completions.columns else rewards * 0
    keep = rewards.notna()
    if not keep.any():
        return None
    return {"length": lengths[keep].tolist(), "reward": rewards[keep].tolist(), "step": steps[keep].tolist()}


def _text_length(completion: Any) -> int:
    """Characters of a logged completion's text (``reward_funcs.inputs.completion_text``: the reply of a
    conversational run, whose messages parquet gives back as an array); the length of its repr when it is neither."""
    from reward_funcs.inputs import completion_text

    if not isinstance(completion, str) and hasattr(completion, "tolist"):
        completion = completion.tolist()
    try:
        return len(completion_text(completion))
    except (TypeError, AttributeError):
        return len(str(completion))
