"""``trl-dapo report OUTPUT_DIR``: one PNG dashboard and a short text summary of a GRPO/DAPO run.

Reads ``OUTPUT_DIR/trainer_state.json`` (else the newest ``checkpoint-*/trainer_state.json``) and, when present, the
``OUTPUT_DIR/completions/*.parquet`` tables TRL writes with ``log_completions=True``. Each panel is drawn only when
the run logged at least one of its metrics, so a plain-TRL run gets fewer panels than a DAPO run with diagnostics.

Modules: ``load`` (the run's files), ``panels`` (what is drawn, and the summary's rows), ``draw`` (the PNG),
``summary`` (health checks and the text summary); this module puts them together (`build_report`) and is the CLI.

Example:
    >>> report = build_report("runs/dapo-tiny")  # doctest: +SKIP
    >>> report.panels  # doctest: +SKIP
    ['Reward and accuracy', 'Zero-variance split', ..., 'Loss and gradient norm']
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .draw import figure_title, save_png
from .load import STATE_FILE, ReportError, find_state_file, load_completions, load_log_history
from .panels import COMPLETIONS_PANEL, PANELS, SUMMARY_KEYS, Panel, Series, completion_points, has_data, panels_for
from .summary import health_checks, summary_text

__all__ = [
    "COMPLETIONS_PANEL",
    "PANELS",
    "STATE_FILE",
    "SUMMARY_KEYS",
    "Panel",
    "Report",
    "ReportError",
    "Series",
    "build_report",
    "find_state_file",
    "load_completions",
    "load_log_history",
    "main",
]


@dataclass
class Report:
    """What `build_report` wrote: the PNG, the text summary, and the titles of the panels drawn."""

    image: Path
    summary_path: Path
    panels: list[str]
    summary: str
    warnings: list[str] = field(default_factory=list)


def build_report(output_dir: str | Path, out: str | Path | None = None) -> Report:
    """Write the dashboard PNG (default ``output_dir/report.png``) and the summary next to it (``.txt``).

    Raises `ReportError` with a one-line reason for a missing directory or state file, malformed JSON, a state
    without logged metrics, or an output path that cannot be written.
    """
    output_dir = Path(output_dir)
    state_file = find_state_file(output_dir)
    history = load_log_history(state_file)
    completions, warnings = load_completions(output_dir)

    panels = [panel for panel in panels_for(history) if has_data(history, panel)]
    completion_rows = completion_points(completions, history) if completions is not None else None
    titles = [panel.title for panel in panels] + ([COMPLETIONS_PANEL] if completion_rows else [])

    image = Path(out) if out is not None else output_dir / "report.png"
    if image.suffix.lower() != ".png":
        raise ReportError(f"--out must name a .png file, got {image}")
    summary_path = image.with_suffix(".txt")
    warnings += health_checks(history)
    text = summary_text(output_dir, state_file, history, completions, titles, warnings)
    try:
        image.parent.mkdir(parents=True, exist_ok=True)
        save_png(image, history, panels, completion_rows, title=figure_title(output_dir, state_file, history))
        summary_path.write_text(text)
    except OSError as error:
        raise ReportError(f"cannot write the report: {error}") from None
    return Report(image=image, summary_path=summary_path, panels=titles, summary=text, warnings=warnings)


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
