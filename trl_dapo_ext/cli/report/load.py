"""Reading a run: its ``trainer_state.json`` (log history) and the completion tables TRL logged; one metric's points."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
REWARD_BAND = ("reward-std", "reward+std")  # not logged: reward -/+ reward_std, derived in `metric_points`


class ReportError(Exception):
    """A problem with the input or output files, explained in one line."""


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


def metric_points(history: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric, non-finite values left out (TRL logs None for an all-NaN metric)."""
    if key in REWARD_BAND:  # the reward band is derived from reward and reward_std
        sign = -1.0 if key == REWARD_BAND[0] else 1.0
        points = [
            (e["step"], e["reward"] + sign * e["reward_std"]) for e in history if "reward" in e and "reward_std" in e
        ]
    else:
        points = [(e["step"], e[key]) for e in history if key in e]
    points = [(step, value) for step, value in points if math.isfinite(value)]
    return [p[0] for p in points], [p[1] for p in points]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
