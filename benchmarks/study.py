"""The pre-registered study's decision rules (benchmarks/protocol.md): the pilot's learning rate, the number of seeds,
the power a design has, and the exact sign-flip test of paired differences.

The study's runs are `ablation.py` runs (one results folder per learning rate in the pilot); this module reads their
``results.json`` and applies the rules as the protocol words them, so that the choice is made by code a reader can
rerun, not by hand.

    PYTHONPATH=. python benchmarks/study.py lr-pilot runs/pilot/lr3e-4 runs/pilot/lr1e-4 runs/pilot/lr3e-5 \\
        --save benchmarks/results/study

``lr-pilot`` prints the sweep (per lr: the pilot seeds' mean held-out sampled accuracy at every evaluation, its
largest fall below the warm start) and the lr the rule picks (section 4: the largest lr whose mean never falls more
than 2 points below its warm start); ``--save DIR`` writes ``DIR/lr_pilot.json`` (the folders' records, accuracy
curves included) and ``DIR/lr_pilot.md`` (the table).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist

from ablation import t_quantile

# Section 4: the pilot's mean may fall at most this far below its warm start, at any evaluation.
LR_TOLERANCE = 0.02
# Section 5: the difference the study is powered for, its test's level and power, and the seed bounds.
EFFECT = 0.02
ALPHA = 0.05
POWER = 0.80
MIN_SEEDS, MAX_SEEDS = 20, 40
# Section 7: above this many pairs the sign-flip test draws its sign assignments instead of listing them.
EXACT_SIGN_FLIP_PAIRS = 20
SIGN_FLIP_DRAWS = 1_000_000


def sampled_curve(run: dict) -> list[tuple[int, float]]:
    """A run's held-out sampled accuracy at each evaluation, the warm start (0 completions) first."""
    return [(point["completions"], point["accuracy"]["sampled"]) for point in run["curve"]]


def lr_sweep_row(lr: float, runs: Sequence[dict], tolerance: float = LR_TOLERANCE) -> dict:
    """One learning rate of the pilot: the seeds' mean sampled accuracy at each evaluation, its largest fall below
    the seeds' mean warm start, and whether that fall stays within ``tolerance`` (section 4).

    >>> run = lambda seed, ys: {"seed": seed, "curve": [
    ...     {"completions": 100 * i, "accuracy": {"sampled": y}} for i, y in enumerate(ys)]}
    >>> row = lr_sweep_row(3e-4, [run(100, [0.60, 0.55, 0.70]), run(101, [0.50, 0.48, 0.62])])
    >>> round(row["warm_start"], 3), round(row["largest_fall"], 3), row["qualifies"]
    (0.55, 0.035, False)
    """
    curves = [sampled_curve(run) for run in runs]
    grids = {tuple(x for x, _ in curve) for curve in curves}
    if len(grids) != 1:
        raise ValueError(f"lr {lr:g}: the pilot's runs were evaluated at different completions: {sorted(grids)}")
    (grid,) = grids
    mean = [statistics.fmean(curve[i][1] for curve in curves) for i in range(len(grid))]
    largest_fall = max(mean[0] - y for y in mean)
    return {
        "lr": lr,
        "seeds": sorted(run["seed"] for run in runs),
        "completions": list(grid),
        "mean_sampled": mean,
        "warm_start": mean[0],
        "final": mean[-1],
        "largest_fall": largest_fall,
        "qualifies": largest_fall <= tolerance + 1e-12,
    }


def chosen_lr(rows: Sequence[dict]) -> float | None:
    """The largest qualifying lr of the sweep, or None when none qualifies (the protocol then extends the grid
    downward by factors of about 3).

    >>> chosen_lr([{"lr": 3e-4, "qualifies": False}, {"lr": 1e-4, "qualifies": True}, {"lr": 3e-5, "qualifies": True}])
    0.0001
    """
    qualifying = [row["lr"] for row in rows if row["qualifies"]]
    return max(qualifying) if qualifying else None


def seeds_for_power(
    sigma: float, effect: float = EFFECT, alpha: float = ALPHA, power: float = POWER, bounds=(MIN_SEEDS, MAX_SEEDS)
) -> int:
    """Section 5's seed rule: Guenther's approximation to the pairs a two-sided paired t-test needs,
    n = (z_{1-alpha/2} + z_{power})^2 sigma^2 / effect^2 + z_{1-alpha/2}^2 / 2, rounded up, within ``bounds``.

    >>> seeds_for_power(0.04, bounds=(1, 100))  # a standardized effect of 0.5 needs 34 pairs
    34
    >>> seeds_for_power(0.01), seeds_for_power(0.2)
    (20, 40)
    """
    z_alpha, z_power = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    n = math.ceil((z_alpha + z_power) ** 2 * sigma**2 / effect**2 + z_alpha**2 / 2 - 1e-9)
    return min(max(n, bounds[0]), bounds[1])


def paired_t_power(n: int, sigma: float, effect: float = EFFECT, alpha: float = ALPHA) -> float:
    """The power of a two-sided paired t-test at level ``alpha`` with ``n`` pairs whose differences have standard
    deviation ``sigma``, against a true mean difference ``effect``: P(|T| > t_crit) for T noncentral t with n - 1
    degrees of freedom and noncentrality effect sqrt(n) / sigma, by integrating over the chi-square of the sample
    variance (midpoint rule).

    >>> round(paired_t_power(34, 0.04), 3)  # standardized effect 0.5, 34 pairs
    0.808
    """
    if n < 2 or sigma <= 0:
        raise ValueError(f"paired_t_power needs n >= 2 and sigma > 0, got n={n}, sigma={sigma}")
    df, noncentrality = n - 1, effect * math.sqrt(n) / sigma
    critical, phi = t_quantile(1 - alpha / 2, df), NormalDist().cdf
    log_norm = (df / 2) * math.log(2) + math.lgamma(df / 2)
    top = df + 12 * math.sqrt(2 * df) + 40
    cells = 20_000
    width = top / cells
    total = 0.0
    for i in range(cells):
        v = (i + 0.5) * width
        density = math.exp((df / 2 - 1) * math.log(v) - v / 2 - log_norm)
        s = math.sqrt(v / df)
        total += density * (phi(noncentrality - critical * s) + phi(-noncentrality - critical * s))
    return total * width


def sign_flip_p(differences: Sequence[float], draws: int = SIGN_FLIP_DRAWS, seed: int = 0) -> float:
    """Two-sided sign-flip (permutation) p of paired differences: the share of sign assignments whose mean is at
    least as far from 0 as the observed one. Exact over all 2^n assignments up to `EXACT_SIGN_FLIP_PAIRS` pairs,
    else ``draws`` random ones (the observed assignment counted once, so p > 0).

    >>> sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.05])  # every difference positive: 2 of 32 assignments
    0.0625
    >>> sign_flip_p([0.01, -0.01])
    1.0
    """
    values = [abs(d) for d in differences]
    observed = abs(sum(differences)) - 1e-12
    if len(values) <= EXACT_SIGN_FLIP_PAIRS:
        hits = sum(
            abs(sum(v if sign else -v for v, sign in zip(values, signs))) >= observed
            for signs in itertools.product((True, False), repeat=len(values))
        )
        return hits / 2 ** len(values)
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in values)) >= observed for _ in range(draws))
    return (hits + 1) / (draws + 1)


def lr_table(rows: Sequence[dict]) -> str:
    """The sweep as a markdown table: one row per lr, the mean sampled accuracy at every evaluation."""
    grid = rows[0]["completions"]
    head = ["lr", "seeds", *(f"{x:,}" for x in grid), "largest fall", "qualifies"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(grid) + 1) + "---|"]
    for row in sorted(rows, key=lambda r: -r["lr"]):
        cells = [f"{row['lr']:g}", ", ".join(map(str, row["seeds"]))]
        cells += [f"{100 * y:.1f}" for y in row["mean_sampled"]]
        cells += [f"{100 * row['largest_fall']:+.1f}", "yes" if row["qualifies"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lr_pilot(folders: Sequence[Path]) -> tuple[list[dict], list[dict]]:
    """The sweep's rows and its runs, from one ablation results folder per lr (arm 3 only, one kernel path)."""
    rows, runs = [], []
    for folder in folders:
        results = json.loads((Path(folder) / "results.json").read_text())
        lr = results["plan"]["demo"]["learning_rate"]
        arms = {run["arm"] for run in results["runs"]}
        if arms != {3}:
            raise SystemExit(f"{folder}: the lr pilot runs arm 3 only, this folder holds arms {sorted(arms)}")
        rows.append(lr_sweep_row(lr, results["runs"]))
        runs += [{**run, "learning_rate": lr} for run in results["runs"]]
    paths = {run["machine"]["kernel_path"] for run in runs}
    if len(paths) != 1:
        raise SystemExit(f"the pilot's runs span kernel paths {sorted(paths)}; section 6 fixes one")
    if len({row["lr"] for row in rows}) != len(rows):
        raise SystemExit("two folders hold the same lr")
    return rows, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    pilot = commands.add_parser("lr-pilot", help="the lr sweep and the lr section 4's rule picks")
    pilot.add_argument("folders", nargs="+", type=Path, help="one ablation results folder per lr")
    pilot.add_argument("--save", type=Path, help="write DIR/lr_pilot.json and DIR/lr_pilot.md")
    ns = parser.parse_args(argv)
    rows, runs = lr_pilot(ns.folders)
    lr = chosen_lr(rows)
    verdict = (
        f"chosen lr: {lr:g} (the largest whose mean never falls more than {100 * LR_TOLERANCE:.0f} points below "
        "its warm start)"
        if lr is not None
        else "no lr qualifies: extend the grid downward (section 4)"
    )
    table = (
        "Held-out sampled accuracy (%), mean over the pilot seeds, at each evaluation (completions); arm 3.\n\n"
        f"{lr_table(rows)}\n\n{verdict}\n"
    )
    print(table)
    if ns.save:
        ns.save.mkdir(parents=True, exist_ok=True)
        (ns.save / "lr_pilot.md").write_text(table)
        record = {"rule": {"tolerance": LR_TOLERANCE}, "chosen_lr": lr, "sweep": rows, "runs": runs}
        (ns.save / "lr_pilot.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
