"""``trl-dapo report OUTPUT_DIR``: one PNG dashboard and a short text summary of a GRPO/DAPO run.

Reads ``OUTPUT_DIR/trainer_state.json`` (else the newest ``checkpoint-*/trainer_state.json``) and, when present, the
``OUTPUT_DIR/completions/*.parquet`` tables TRL writes with ``log_completions=True``. Each panel is drawn only when
the run logged at least one of its metrics, so a plain-TRL run gets fewer panels than a DAPO run with diagnostics.

Example:
    >>> report = build_report("runs/dapo-tiny")  # doctest: +SKIP
    >>> report.panels  # doctest: +SKIP
    ['Reward and accuracy', 'Zero-variance split', ..., 'Loss and gradient norm']
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"


class ReportError(Exception):
    """A problem with the input or output files, explained in one line."""


@dataclass(frozen=True)
class Series:
    """One metric in a panel: log key, legend label, and which y axis (right for a different unit)."""

    key: str
    label: str
    right: bool = False


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

    def keys(self) -> list[str]:
        return [s.key for s in (*self.stacked, *self.lines)]


# `rewards/<name>/mean` series are added per run (see `_panels_for`).
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
        band=("reward-std", "reward+std"),
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
        "Dynamic sampling: retention and rounds",
        lines=(
            Series("dynamic_sampling/retention_rate", "retention rate"),
            Series("dynamic_sampling/rounds", "generation rounds", right=True),
        ),
        ylabel="retained / attempted groups",
        right_ylabel="rounds",
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
SUMMARY_KEYS: tuple[str, ...] = (
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
)


@dataclass
class Report:
    """What `build_report` wrote: the PNG, the text summary, and the titles of the panels drawn."""

    image: Path
    summary_path: Path
    panels: list[str]
    summary: str
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------------- loading


def find_state_file(output_dir: Path) -> Path:
    """``output_dir/trainer_state.json``, else the one in the highest-numbered ``checkpoint-*`` folder."""
    if not output_dir.exists():
        raise ReportError(f"{output_dir} does not exist")
    if not output_dir.is_dir():
        raise ReportError(f"{output_dir} is not a directory (pass the run's output_dir)")
    top = output_dir / STATE_FILE
    if top.is_file():
        return top
    checkpoints = [
        (int(match.group(1)), path)
        for path in output_dir.glob("checkpoint-*")
        if (match := re.fullmatch(r"checkpoint-(\d+)", path.name)) and (path / STATE_FILE).is_file()
    ]
    if not checkpoints:
        raise ReportError(
            f"no {STATE_FILE} in {output_dir} or its checkpoint-* folders: call trainer.save_state() after "
            "training, or train with a save_strategy other than 'no'"
        )
    return max(checkpoints)[1] / STATE_FILE


def load_log_history(state_file: Path) -> list[dict[str, Any]]:
    """The training entries of ``log_history`` (those with a ``step``), eval entries and non-numbers dropped."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"cannot read {state_file}: {error}") from None
    except json.JSONDecodeError as error:
        raise ReportError(f"{state_file} is not valid JSON ({error})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ReportError(f"{state_file} has no log_history list: is it a transformers trainer_state.json?")
    entries = []
    for entry in history:
        # Skip Trainer's end-of-training summary (train_runtime, train_loss, ...): it is not a logging step.
        if not isinstance(entry, dict) or not _is_number(entry.get("step")) or "train_runtime" in entry:
            continue
        values = {
            key: float(value)
            for key, value in entry.items()
            if _is_number(value) and not key.startswith("eval_") and key not in ("step", "epoch")
        }
        if values:
            entries.append({"step": float(entry["step"]), **values})
    if not entries:
        raise ReportError(
            f"{state_file} logged no training metrics (empty log_history): train for at least logging_steps steps"
        )
    return entries


def load_completions(output_dir: Path) -> tuple[Any | None, list[str]]:
    """All ``completions/*.parquet`` tables concatenated (pandas), or None; plus warnings for unreadable files."""
    files = sorted((output_dir / "completions").glob("*.parquet"))
    if not files:
        return None, []
    import pandas as pd

    frames, warnings = [], []
    for path in files:
        try:
            frames.append(pd.read_parquet(path))
        except Exception as error:  # a torn or foreign file must not cost the whole report
            warnings.append(f"skipped unreadable {path.name}: {type(error).__name__}")
    if not frames:
        return None, warnings
    return pd.concat(frames, ignore_index=True), warnings


# ---------------------------------------------------------------------------------------------------------- report


def build_report(output_dir: str | Path, out: str | Path | None = None) -> Report:
    """Write the dashboard PNG (default ``output_dir/report.png``) and the summary next to it (``.txt``).

    Raises `ReportError` with a one-line reason for a missing directory or state file, malformed JSON, a state
    without logged metrics, or an output path that cannot be written.
    """
    output_dir = Path(output_dir)
    state_file = find_state_file(output_dir)
    history = load_log_history(state_file)
    completions, warnings = load_completions(output_dir)

    panels = [panel for panel in _panels_for(history) if _has_data(history, panel)]
    completion_rows = _completion_points(completions, history) if completions is not None else None
    titles = [panel.title for panel in panels] + ([COMPLETIONS_PANEL] if completion_rows else [])

    image = Path(out) if out is not None else output_dir / "report.png"
    if image.suffix.lower() != ".png":
        raise ReportError(f"--out must name a .png file, got {image}")
    summary_path = image.with_suffix(".txt")
    warnings += _health_checks(history)
    summary = _summary(output_dir, state_file, history, completions, titles, warnings)
    try:
        image.parent.mkdir(parents=True, exist_ok=True)
        _draw(image, history, panels, completion_rows, title=_title(output_dir, state_file, history))
        summary_path.write_text(summary)
    except OSError as error:
        raise ReportError(f"cannot write the report: {error}") from None
    return Report(image=image, summary_path=summary_path, panels=titles, summary=summary, warnings=warnings)


def _panels_for(history: list[dict[str, float]]) -> list[Panel]:
    """PANELS with one line per reward function (``rewards/<name>/mean``) added to the reward panel."""
    reward_keys = sorted({key for entry in history for key in entry if re.fullmatch(r"rewards/.+/mean", key)})
    extra = tuple(Series(key, key.split("/", 1)[1].rsplit("/", 1)[0]) for key in reward_keys)
    panels = []
    for panel in PANELS:
        if panel.title == "Reward and accuracy":
            panel = replace(panel, lines=panel.lines + extra)
        panels.append(panel)
    return panels


def _has_data(history: list[dict[str, float]], panel: Panel) -> bool:
    return any(math.isfinite(entry.get(key, math.nan)) for entry in history for key in panel.keys())


def _series(history: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric, non-finite values left out (TRL logs None for an all-NaN metric)."""
    if key in ("reward-std", "reward+std"):  # the reward band is derived from reward and reward_std
        sign = -1.0 if key == "reward-std" else 1.0
        points = [
            (e["step"], e["reward"] + sign * e["reward_std"]) for e in history if "reward" in e and "reward_std" in e
        ]
    else:
        points = [(e["step"], e[key]) for e in history if key in e]
    points = [(step, value) for step, value in points if math.isfinite(value)]
    return [p[0] for p in points], [p[1] for p in points]


def _completion_points(completions, history) -> dict[str, list[float]] | None:
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
    lengths = completions["completion"].map(lambda c: len(_completion_text(c)))
    steps = completions["step"] if "step" in completions.columns else rewards * 0
    keep = rewards.notna()
    if not keep.any():
        return None
    return {"length": lengths[keep].tolist(), "reward": rewards[keep].tolist(), "step": steps[keep].tolist()}


def _completion_text(completion: Any) -> str:
    # Plain text, or (conversational runs, TRL >= 1.15) a list of messages whose last one is the reply.
    if isinstance(completion, str):
        return completion
    try:
        return str(completion[-1]["content"])
    except (IndexError, KeyError, TypeError):
        return str(completion)


# ------------------------------------------------------------------------------------------------------- drawing


PANEL_HEIGHT_IN = 2.6  # the plotting area of one panel
LEGEND_COLUMNS = 3
_LEGEND_ROW_IN = 0.2
_TITLE_IN, _XLABEL_IN = 0.45, 0.5  # above a panel (its title) and below it (tick labels and the x label)


def _draw(image: Path, history, panels: list[Panel], completion_rows, title: str) -> None:
    _figure(history, panels, completion_rows, title).savefig(image, format="png")


def _figure(history, panels: list[Panel], completion_rows, title: str):
    """The dashboard as a matplotlib Figure: panels in two columns, each legend below its panel, never over data."""
    # The object-oriented API with the Agg canvas: no pyplot state, no display, whatever backend the caller set.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    count = len(panels) + (1 if completion_rows else 0)
    columns = 2 if count > 1 else 1
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(7 * columns, 1.0), dpi=100)  # the height is set below, once the legends are known
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    legend_rows = [_draw_panel(ax, history, panel) for ax, panel in zip(axes, panels, strict=False)]
    if completion_rows:
        _draw_completions(axes[len(panels)], completion_rows)
    for ax in axes[count:]:
        ax.set_visible(False)
    # Fixed margins (inches -> fractions) instead of constrained layout, which draws the figure twice: 2x slower.
    # Every row leaves room under its panels for the tallest legend of the figure.
    legend_in = _LEGEND_ROW_IN * max(legend_rows, default=0) + 0.1
    gap_in = _XLABEL_IN + legend_in + _TITLE_IN
    height = rows * PANEL_HEIGHT_IN + (rows - 1) * gap_in + 0.75 + _XLABEL_IN + legend_in
    figure.set_size_inches(7 * columns, height)
    figure.suptitle(title, y=1 - 0.15 / height, verticalalignment="top")  # above the first row's panel titles
    figure.subplots_adjust(
        left=0.9 / (7 * columns),
        right=1 - 0.85 / (7 * columns),
        top=1 - 0.75 / height,
        bottom=(_XLABEL_IN + legend_in) / height,
        hspace=gap_in / PANEL_HEIGHT_IN,
        wspace=0.35 if columns > 1 else 0.2,
    )
    return figure


def _title(output_dir: Path, state_file: Path, history) -> str:
    source = "" if state_file.parent == output_dir else f" ({state_file.parent.name})"
    steps = [int(e["step"]) for e in history]
    return f"{output_dir.resolve().name}{source}: steps {min(steps)} to {max(steps)}"


def _draw_panel(ax, history, panel: Panel) -> int:
    """Draw one panel; return how many rows its legend takes (below the panel)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    if panel.band is not None:
        (low_x, low), (high_x, high) = _series(history, panel.band[0]), _series(history, panel.band[1])
        if low and low_x == high_x:
            ax.fill_between(low_x, low, high, alpha=0.15, color="gray", label=_band_label(panel.band))
    stacked = [(s, *_series(history, s.key)) for s in panel.stacked]
    stacked = [(s, x, y) for s, x, y in stacked if y]
    if stacked:
        _draw_stacked(ax, stacked)
    right_ax = None
    # One colour cycle over both axes (each axis would restart it), after the stacked layers' colours.
    for index, series in enumerate(panel.lines, start=len(stacked)):
        x, y = _series(history, series.key)
        if not y:
            continue
        target = ax
        if series.right:
            if right_ax is None:
                right_ax = ax.twinx()
                right_ax.set_ylabel(panel.right_ylabel)
                if panel.right_ylim is not None:
                    right_ax.set_ylim(*panel.right_ylim)
            target = right_ax
        style = "--" if series.right else "-"
        marker = "o" if len(y) < 30 else None
        target.plot(x, y, style, color=f"C{index % 10}", marker=marker, markersize=3, label=series.label)
    handles, labels = ax.get_legend_handles_labels()
    if right_ax is not None:
        more_handles, more_labels = right_ax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if not handles:
        return 0
    # Below the panel, under its x label: a legend inside the axes hides data (and, with a twin axis, lines).
    ax.legend(
        handles,
        labels,
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -_XLABEL_IN / PANEL_HEIGHT_IN),
        ncol=LEGEND_COLUMNS,
        frameon=False,
        borderaxespad=0.0,
    )
    return math.ceil(len(handles) / LEGEND_COLUMNS)


def _draw_stacked(ax, stacked) -> None:
    # Stack over the steps every stacked series has, so the layers line up.
    common = sorted(set.intersection(*(set(x) for _, x, _ in stacked)))
    if not common:
        return
    layers = [[dict(zip(x, y, strict=True))[step] for step in common] for _, x, y in stacked]
    ax.stackplot(common, *layers, labels=[s.label for s, _, _ in stacked], alpha=0.6)


def _band_label(band: tuple[str, str]) -> str:
    if band == ("reward-std", "reward+std"):
        return "reward ± std"
    return f"{band[0].rsplit('/', 1)[-1]} to {band[1].rsplit('/', 1)[-1]}"


def _draw_completions(ax, rows: dict[str, list[float]]) -> None:
    ax.set_title(COMPLETIONS_PANEL)
    points = ax.scatter(rows["length"], rows["reward"], c=rows["step"], s=8, alpha=0.6, cmap="viridis")
    ax.set_xlabel("completion length (characters)")
    ax.set_ylabel("sum of reward columns")
    ax.grid(alpha=0.3)
    ax.figure.colorbar(points, ax=ax, label="step")


# ------------------------------------------------------------------------------------------------------- summary

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


def _health_checks(history: list[dict[str, float]]) -> list[str]:
    """Plain-language warnings from the recent values (mean of the last 10% of logged points, at least one)."""
    warnings = []
    for key, direction, threshold, message in _CHECKS:
        recent = _recent(history, key)
        if recent is not None and (recent > threshold if direction == "gt" else recent < threshold):
            warnings.append(f"{key} = {recent:.3g}: {message}")
    _, entropy = _series(history, "entropy")
    if len(entropy) >= 2 and entropy[0] > 0 and _recent(history, "entropy") < 0.3 * entropy[0]:
        warnings.append("entropy fell below 30% of its first value: the policy may be collapsing")
    for key in ("loss", "grad_norm"):
        bad = [e["step"] for e in history if key in e and not math.isfinite(e[key])]
        if bad:
            warnings.append(f"{key} is not finite at step {int(bad[0])}")
    return warnings


def _recent(history: list[dict[str, float]], key: str) -> float | None:
    _, values = _series(history, key)
    if not values:
        return None
    tail = values[-max(1, len(values) // 10) :]
    return sum(tail) / len(tail)


def _summary(output_dir: Path, state_file: Path, history, completions, panels, warnings) -> str:
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
        _, values = _series(history, key)
        if values:
            rows.append(f"  {key:<42}{values[0]:>11.4g}{values[-1]:>11.4g}{min(values):>11.4g}{max(values):>11.4g}")
    if rows:
        lines += ["", f"  {'metric':<42}{'first':>11}{'last':>11}{'min':>11}{'max':>11}", *rows]
    lines += ["", "checks:"]
    lines += [f"  ! {w}" for w in warnings] or ["  no warnings"]
    return "\n".join(lines) + "\n"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None, prog: str = "trl-dapo report") -> int:
    """Entry point of ``trl-dapo report``; returns 0, or 2 with a one-line message on stderr."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Draw a PNG dashboard and a text summary from a GRPO/DAPO run's output_dir.",
    )
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="the run's output_dir (holds trainer_state.json)")
    parser.add_argument(
        "--out",
        metavar="PATH",
        help="PNG to write (default OUTPUT_DIR/report.png); the summary goes next to it as .txt",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args(argv)
    try:
        report = build_report(args.output_dir, args.out)
    except ReportError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(report.summary, end="")
    print(f"wrote {report.image} and {report.summary_path}", file=sys.stderr)
    return 0
