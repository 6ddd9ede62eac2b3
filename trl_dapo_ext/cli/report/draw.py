"""Drawing the dashboard: panels in two columns, each legend below its panel, never over data (matplotlib, Agg)."""

from __future__ import annotations

import math
from pathlib import Path

from .load import REWARD_BAND, metric_points
from .panels import COMPLETIONS_PANEL, Panel

PANEL_HEIGHT_IN = 2.6  # the plotting area of one panel
LEGEND_COLUMNS = 3
_LEGEND_ROW_IN = 0.2
_TITLE_IN, _XLABEL_IN = 0.45, 0.5  # above a panel (its title) and below it (tick labels and the x label)


def save_png(image: Path, history, panels: list[Panel], completion_rows, title: str) -> None:
    build_figure(history, panels, completion_rows, title).savefig(image, format="png")


def build_figure(history, panels: list[Panel], completion_rows, title: str):
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


def figure_title(output_dir: Path, state_file: Path, history) -> str:
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
        (low_x, low), (high_x, high) = metric_points(history, panel.band[0]), metric_points(history, panel.band[1])
        if low and low_x == high_x:
            ax.fill_between(low_x, low, high, alpha=0.15, color="gray", label=_band_label(panel.band))
    stacked = [(s, *metric_points(history, s.key)) for s in panel.stacked]
    stacked = [(s, x, y) for s, x, y in stacked if y]
    if stacked:
        _draw_stacked(ax, stacked)
    right_ax = None
    # One colour cycle over both axes (each axis would restart it), after the stacked layers' colours.
    for index, series in enumerate(panel.lines, start=len(stacked)):
        x, y = metric_points(history, series.key)
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
    for axis in (ax, right_ax):
        _plain_tick_labels(axis)
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


def _plain_tick_labels(axis) -> None:
    """Tick labels as the values themselves: matplotlib would write a nearly flat series (entropy 4.5960 to 4.5961)
    as ``1e-5`` ticks plus an offset label ``+4.596`` above the panel."""
    from matplotlib.ticker import ScalarFormatter

    if axis is not None and isinstance(axis.yaxis.get_major_formatter(), ScalarFormatter):
        axis.ticklabel_format(axis="y", useOffset=False, style="plain")


def _draw_stacked(ax, stacked) -> None:
    # Stack over the steps every stacked series has, so the layers line up.
    common = sorted(set.intersection(*(set(x) for _, x, _ in stacked)))
    if not common:
        return
    layers = [[dict(zip(x, y, strict=True))[step] for step in common] for _, x, y in stacked]
    ax.stackplot(common, *layers, labels=[s.label for s, _, _ in stacked], alpha=0.6)


def _band_label(band: tuple[str, str]) -> str:
    if band == REWARD_BAND:
        return "reward ± std"
    return f"{band[0].rsplit('/', 1)[-1]} to {band[1].rsplit('/', 1)[-1]}"


def _draw_completions(ax, rows: dict[str, list[float]]) -> None:
    ax.set_title(COMPLETIONS_PANEL)
    points = ax.scatter(rows["length"], rows["reward"], c=rows["step"], s=8, alpha=0.6, cmap="viridis")
    ax.set_xlabel("completion length (characters)")
    ax.set_ylabel("sum of reward columns")
    ax.grid(alpha=0.3)
    ax.figure.colorbar(points, ax=ax, label="step")
