"""The text half of the report: plain-language health checks on the recent values, and the summary table."""

from __future__ import annotations

import math
from pathlib import Path

from trl_dapo_ext.metric_names import declared

from .load import metric_points
from .panels import SUMMARY_KEYS

# (key, direction, threshold, message): a warning when the recent mean is above ("gt") or below ("lt") the threshold.
_CHECKS: tuple[tuple[str, str, float, str], ...] = (
    ("completions/clipped_ratio", "gt", 0.2, "many completions hit max_completion_length: raise it or shape length"),
    ("length/truncated_frac", "gt", 0.2, "many completions hit max_completion_length: raise it or shape length"),
    ("frac_reward_zero_std", "gt", 0.5, "most groups have no reward contrast and teach nothing"),
    ("groups/frac_all_max", "gt", 0.5, "most groups are all correct: the prompts are too easy"),
    ("groups/frac_all_min", "gt", 0.5, "most groups are all wrong: the prompts are too hard or the verifier rejects"),
    ("dynamic_sampling/retention_rate", "lt", 0.2, "dynamic sampling keeps under 20% of groups: generation is wasted"),
    ("clip_ratio/region_mean", "gt", 0.2, "many tokens are clipped: updates move the policy too far"),
    ("cost/padded_token_frac", "gt", 0.5, "over half of the update batch is padding"),
)
for _key, *_ in _CHECKS:
    declared(_key)  # a KeyError here: the metric was renamed in trl_dapo_ext/metric_names.py


def health_checks(history: list[dict[str, float]]) -> list[str]:
    """Plain-language warnings from the recent values (mean of the last 10% of logged points, at least one)."""
    warnings, said = [], set()
    for key, direction, threshold, message in _CHECKS:
        recent = _recent(history, key)
        if message in said:  # TRL's clipped_ratio and our truncated_frac measure one problem: warn once
            continue
        if recent is not None and (recent > threshold if direction == "gt" else recent < threshold):
            warnings.append(f"{key} = {recent:.3g}: {message}")
            said.add(message)
    _, entropy = metric_points(history, "entropy")
    if len(entropy) >= 2 and entropy[0] > 0 and _recent(history, "entropy") < 0.3 * entropy[0]:
        warnings.append("entropy fell below 30% of its first value: the policy may be collapsing")
    for key in ("loss", "grad_norm"):
        bad = [e["step"] for e in history if key in e and not math.isfinite(e[key])]
        if bad:
            warnings.append(f"{key} is not finite at step {int(bad[0])}")
    return warnings


def _recent(history: list[dict[str, float]], key: str) -> float | None:
    _, values = metric_points(history, key)
    if not values:
        return None
    tail = values[-max(1, len(values) // 10) :]
    return sum(tail) / len(tail)


def summary_text(output_dir: Path, state_file: Path, history, completions, panels, warnings) -> str:
    steps = [int(e["step"]) for e in history]
    lines = [
        f"trl-dapo report: {output_dir}",
        f"state: {state_file.relative_to(output_dir)}, {len(history)} logged entries, steps {min(steps)}..{max(steps)}",
    ]
    if completions is not None:
        note = ""
        if "advantage" in completions.columns:
            note = f", {(completions['advantage'] == 0).mean():.0%} with zero advantage"
        lines.append(f"completions: {len(completions)} logged rows{note}")
    lines.append("panels: " + "; ".join(panels))
    rows = []
    for key in SUMMARY_KEYS:
        _, values = metric_points(history, key)
        if values:
            rows.append(f"  {key:<42}{values[0]:>11.4g}{values[-1]:>11.4g}{min(values):>11.4g}{max(values):>11.4g}")
    if rows:
        lines += ["", f"  {'metric':<42}{'first':>11}{'last':>11}{'min':>11}{'max':>11}", *rows]
    lines += ["", "checks:"]
    lines += [f"  ! {w}" for w in warnings] or ["  no warnings"]
    return "\n".join(lines) + "\n"
