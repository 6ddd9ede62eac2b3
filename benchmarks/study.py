"""The pre-registered study's rules (benchmarks/protocol.md) as code: the pilot's learning rate (section 4), the
number of seeds (section 5) and the analysis (section 7: paired t-intervals, exact sign-flip tests, Holm over the
secondaries, breakdowns, cost units, power).

The study's runs are `ablation.py` runs; this module reads their ``results.json`` and applies the rules as the
protocol words them, so that every choice is made by code a reader can rerun, not by hand.

    PYTHONPATH=. python benchmarks/study.py lr-pilot runs/pilot/lr3e-4 runs/pilot/lr1e-4 runs/pilot/lr3e-5 \\
        --save benchmarks/results/study
    PYTHONPATH=. python benchmarks/study.py seeds runs/pilot/lr1e-4 --save benchmarks/results/study
    PYTHONPATH=. python benchmarks/study.py analyze runs/study/results.json --pilot-sigma 0.03 --save DIR
    PYTHONPATH=. python benchmarks/study.py profile-threshold runs/study/results.json runs/study/seed*/task_check.json
    PYTHONPATH=. python benchmarks/study.py status benchmarks/results/study/seeds

``lr-pilot`` prints the sweep (per lr, one results folder each: the pilot seeds' mean held-out sampled accuracy at
every evaluation and its largest fall below the warm start) and the lr the rule picks; ``seeds`` reads arms 3 and
10 of the chosen lr's folder and prints the study's seed count; ``analyze`` prints the study's tables;
``profile-threshold`` relates each seed's primary gain to the saving `trl-dapo profile` predicts at its warm start
(amendment 3: its ``checks`` are ``ablation.py --check-task 1000`` of the study's seed folders); ``status`` lists the
protocol runs and checks not yet kept. ``--save DIR`` writes each one's markdown and JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist

import numpy as np
from ablation import holm, paired, t_interval, t_quantile, t_two_sided_p

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


def without_per_step(run: dict) -> dict:
    """A record whole but its per-step counters (benchmarks/pipeline_cost.py reads those; the rules do not): what the
    saved pilot files keep."""
    return {k: v for k, v in run.items() if k != "per_step"}


def sampled_curve(run: dict) -> list[tuple[int, float]]:
    """A run's held-out sampled accuracy at each evaluation, the warm start (0 completions) first."""
    return [(point["completions"], point["accuracy"]["sampled"]) for point in run["curve"]]


def lr_sweep_row(lr: float, runs: Sequence[dict], tolerance: float = LR_TOLERANCE) -> dict:
    """One learning rate of the pilot: the mean sampled accuracy over its seeds at each evaluation, its largest fall
    below the mean warm start, and whether that fall stays within ``tolerance`` (section 4).

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
    values = np.abs(np.asarray(differences, dtype=np.float64))
    observed = abs(float(np.sum(differences))) - 1e-12
    n = len(values)
    if n <= EXACT_SIGN_FLIP_PAIRS:
        codes = np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n)
        sums = np.abs(((codes & 1) * 2 - 1) @ values)
        return float(np.mean(sums >= observed))
    rng, hits, left = np.random.default_rng(seed), 0, draws
    while left:
        chunk = min(left, 100_000)
        signs = rng.integers(0, 2, size=(chunk, n)) * 2 - 1
        hits += int(np.sum(np.abs(signs @ values) >= observed))
        left -= chunk
    return (hits + 1) / (draws + 1)


# --- the analysis (section 7) ----------------------------------------------------------------------------------------

PRIMARY = (10, 3)  # arm, reference
SECONDARIES = (1, 4, 7, 11, 8)
# Section 5's outcome (benchmarks/results/study/seed_rule.json): seeds 0-19 run the primary pair, 0-9 every arm and
# the exploratory G = 16 pair.
STUDY_SEEDS, SECONDARY_SEEDS = 20, 10
# The cost axes of a record's curve, for the areas and times to target: the primary's, then the descriptive ones.
AXES = {
    "completions": "generated completions",
    "generated_tokens": "generated tokens",
    "cpu_s": "CPU seconds of training",
    "decode_steps": "modelled GPU decode steps",
    "cpu_evaluations": "training CPU s per evaluation's wall s (amendment 4)",
}


def with_speed_free_time(run: dict) -> dict:
    """``run`` with amendment 4's axis on its curve: training CPU seconds over the run's own mean wall seconds per
    held-out evaluation (every evaluation is the same work), so the machine's speed at the time of the run cancels.
    The warm start's point (0 completions) was evaluated before the run and is not one of its evaluations.

    >>> run = {"eval_s": 20.0, "curve": [{"completions": 0, "cpu_s": 0.0}, {"completions": 8, "cpu_s": 30.0},
    ...                                  {"completions": 16, "cpu_s": 50.0}]}
    >>> [point["cpu_evaluations"] for point in with_speed_free_time(run)["curve"]]
    [0.0, 3.0, 5.0]
    """
    evaluations = sum(1 for point in run["curve"] if point["completions"] > 0)
    per_evaluation = run["eval_s"] / evaluations
    curve = [{**point, "cpu_evaluations": point["cpu_s"] / per_evaluation} for point in run["curve"]]
    return {**run, "curve": curve}


def compare(differences: Sequence[float], level: float = 0.95) -> dict:
    """A paired comparison: the mean difference, its t-interval, the t-test's p and the sign-flip p.

    >>> c = compare([0.01, 0.03, 0.02, 0.04])
    >>> round(c["mean"], 3), round(c["low"], 4), round(c["high"], 4), c["sign_flip_p"]
    (0.025, 0.0045, 0.0455, 0.125)
    """
    n = len(differences)
    mean = statistics.fmean(differences)
    sd = statistics.stdev(differences) if n > 1 else float("nan")
    interval = t_interval(differences, level)
    if n > 1 and sd > 0:
        t_p = t_two_sided_p(mean / (sd / math.sqrt(n)), n - 1)
    else:
        t_p = float("nan")
    low, high = (interval[1], interval[2]) if interval else (float("nan"), float("nan"))
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "low": low,
        "high": high,
        "t_p": t_p,
        "sign_flip_p": sign_flip_p(differences),
    }


def reading(comparison: dict, alpha: float = ALPHA, margin: float = EFFECT) -> str:
    """Section 7's reading of the primary comparison.

    >>> reading({"low": 0.004, "high": 0.04, "sign_flip_p": 0.01})
    'better'
    >>> reading({"low": -0.012, "high": 0.015, "sign_flip_p": 0.6})
    'no difference detected; equivalent within 2 points'
    """
    if comparison["low"] > 0 and comparison["sign_flip_p"] < alpha:
        return "better"
    if comparison["high"] < 0 and comparison["sign_flip_p"] < alpha:
        return "worse"
    words = "no difference detected"
    if -margin <= comparison["low"] and comparison["high"] <= margin:
        words += f"; equivalent within {100 * margin:.0f} points"
    return words


def area_per_unit(curve: Sequence[dict], axis: str, end: float) -> float:
    """The area under the sampled-accuracy curve against ``axis`` from 0 to ``end`` (linear between evaluations),
    divided by ``end``: the run's mean accuracy over that much cost.

    >>> curve = [{"cpu_s": 0, "accuracy": {"sampled": 0.5}}, {"cpu_s": 10, "accuracy": {"sampled": 0.7}}]
    >>> round(area_per_unit(curve, "cpu_s", 10), 6), round(area_per_unit(curve, "cpu_s", 5), 6)
    (0.6, 0.55)
    """
    xs = [point[axis] for point in curve]
    ys = [point["accuracy"]["sampled"] for point in curve]
    area = 0.0
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 >= end:
            break
        if x1 > end:  # the last piece, cut at end
            y1, x1 = y0 + (y1 - y0) * (end - x0) / (x1 - x0), end
        area += (x1 - x0) * (y0 + y1) / 2
    return area / end


def time_to(curve: Sequence[dict], axis: str, target: float) -> float | None:
    """The first point on ``axis`` (linear between evaluations) where sampled accuracy reaches ``target``; None when
    the run never does (censored at its end).

    >>> curve = [{"x": 0, "accuracy": {"sampled": 0.5}}, {"x": 10, "accuracy": {"sampled": 0.7}}]
    >>> time_to(curve, "x", 0.6), time_to(curve, "x", 0.8)
    (5.0, None)
    """
    previous = None
    for point in curve:
        x, y = point[axis], point["accuracy"]["sampled"]
        if y >= target:
            if previous is None or previous[1] >= target:
                return float(x)
            x0, y0 = previous
            return x0 + (x - x0) * (target - y0) / (y - y0)
        previous = (x, y)
    return None


def unit_comparisons(runs: Sequence[dict], arm: int, reference: int = 3) -> dict:
    """Section 7's cost units for ``arm`` against ``reference``, paired by seed: the area per unit of each axis up to
    the shorter run of the pair, and each run's time to its seed's target (warm start + half of the reference's gain
    at the budget; a seed whose reference gained nothing has no target), with the censored runs counted."""
    by = {(run["arm"], run["seed"]): with_speed_free_time(run) for run in runs if run["arm"] in (arm, reference)}
    seeds = sorted(seed for a, seed in by if a == arm and (reference, seed) in by)
    out: dict = {"seeds": len(seeds)}
    for axis in AXES:
        areas = []
        for seed in seeds:
            a, r = by[arm, seed]["curve"], by[reference, seed]["curve"]
            end = min(a[-1][axis], r[-1][axis])
            if end > 0:
                areas.append(area_per_unit(a, axis, end) - area_per_unit(r, axis, end))
        times: dict[str, list] = {"arm": [], "reference": []}
        for seed in seeds:
            r = by[reference, seed]
            start, gain = (
                r["curve"][0]["accuracy"]["sampled"],
                r["accuracy_after"]["sampled"] - r["curve"][0]["accuracy"]["sampled"],
            )
            if gain <= 0:
                continue
            target = start + gain / 2
            times["arm"].append(time_to(by[arm, seed]["curve"], axis, target))
            times["reference"].append(time_to(r["curve"], axis, target))
        out[axis] = {
            "area": compare(areas) if len(areas) > 1 else None,
            "time_to_target": {
                side: {
                    "reached": sum(t is not None for t in values),
                    "of": len(values),
                    "median": _median_censored(values),
                }
                for side, values in times.items()
            },
        }
    return out


def _median_censored(values: Sequence[float | None]) -> float | None:
    """The median with censored values (None) counted as above every observed one: None when half or more are."""
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    if not ordered:
        return None
    middle = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else None
    if len(ordered) % 2 == 0:
        low, high = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
        middle = None if low is None or high is None else (low + high) / 2
    return middle


def analyze(results: dict, pilot_sigma: float | None = None) -> dict:
    """Section 7 on a study's results (``ablation.py``'s results.json): the primary comparison and its reading, the
    secondaries with Holm's adjustment over their sign-flip p's, the breakdowns, the cost units and the power."""
    runs = results["runs"]
    paths = {run["machine"]["kernel_path"] for run in runs}
    if len(paths) != 1:
        raise SystemExit(f"the study's runs span kernel paths {sorted(paths)}; section 6 fixes one")
    final = lambda run: run["accuracy_after"]["sampled"]  # noqa: E731
    arm, reference = PRIMARY
    primary = compare(list(paired(runs, arm, reference, final).values()))
    primary["reading"] = reading(primary)
    secondaries = {
        a: compare(list(diffs.values())) for a in SECONDARIES if len(diffs := paired(runs, a, reference, final)) > 1
    }
    adjusted = holm({a: c["sign_flip_p"] for a, c in secondaries.items()})
    for a, c in secondaries.items():
        c["holm_p"] = adjusted[a]
        c["finding"] = adjusted[a] < ALPHA
    classes = list(runs[0]["curve"][-1]["accuracy_by_class"])
    breakdowns = {}
    for a in (arm, *secondaries):
        rows = {}
        for kind in ("sampled", "greedy", "pass_at_k"):
            value = lambda r, kind=kind: r["accuracy_after"][kind]  # noqa: E731
            rows[kind] = compare(list(paired(runs, a, reference, value).values()))
        for name in classes:
            value = lambda r, name=name: r["curve"][-1]["accuracy_by_class"][name]["sampled"]  # noqa: E731
            rows[f"class {name}"] = compare(list(paired(runs, a, reference, value).values()))
        breakdowns[a] = rows
    # Section 6: one CPU model, or the primary blocked on the model as an exploratory breakdown.
    cpu_models = sorted({run["machine"].get("cpu", "unknown") for run in runs})
    by_cpu_model = {}
    if len(cpu_models) > 1:
        for model in cpu_models:
            on_model = [run for run in runs if run["machine"].get("cpu", "unknown") == model]
            if len(diffs := paired(on_model, arm, reference, final)) > 1:
                by_cpu_model[model] = compare(list(diffs.values()))
    measurable = primary["n"] > 1 and primary["sd"] > 0  # no spread, no power to state
    power = {
        "observed_sd": primary["sd"],
        "at_observed_sd": paired_t_power(primary["n"], primary["sd"]) if measurable else None,
    }
    if pilot_sigma is not None:
        power |= {"pilot_sigma": pilot_sigma, "at_pilot_sigma": paired_t_power(primary["n"], pilot_sigma)}
    return {
        "primary": {"arm": arm, "reference": reference, **primary},
        "secondaries": secondaries,
        "breakdowns": breakdowns,
        "units": {a: unit_comparisons(runs, a, reference) for a in (arm, *secondaries)},
        "power": power,
        "kernel_path": paths.pop(),
        "cpu_models": cpu_models,
        "by_cpu_model": by_cpu_model,
    }


def _points(comparison: dict | None) -> str:
    """A comparison in points: mean [low, high]."""
    if comparison is None:
        return "-"
    return f"{100 * comparison['mean']:+.1f} [{100 * comparison['low']:+.1f}, {100 * comparison['high']:+.1f}]"


def _median_cell(times: dict) -> str:
    """A side's median time to target and how many of its runs reached it."""
    shown = "censored" if times["median"] is None else f"{times['median']:,.0f}"
    return f"{shown} ({times['reached']}/{times['of']})"


def _flips(n: int) -> str:
    """How the sign-flip p of ``n`` pairs was computed."""
    return f"exact, 2^{n} assignments" if n <= EXACT_SIGN_FLIP_PAIRS else f"{SIGN_FLIP_DRAWS:,} random assignments"


def _p(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


def report(analysis: dict, arm_names: dict[int, str] | None = None, exploratory: str | None = None) -> str:
    """The analysis as markdown: the primary result and its reading, the secondaries with raw and Holm p, the
    breakdowns, the cost units and the power. Differences are in points of held-out accuracy, arm minus arm 3.
    ``exploratory``: what an exploratory pair is (e.g. "G = 16"), reported as such: its reading is not a finding."""
    names = arm_names or {}
    label = lambda arm: f"{arm} {names.get(arm, '')}".strip()  # noqa: E731
    primary = analysis["primary"]
    title, verdict = ("**Primary**", f"**{primary['reading']}**")
    if exploratory:
        title, verdict = f"Exploratory, {exploratory}", f"{primary['reading']} (exploratory: not a protocol finding)"
    lines = [
        f"{title} (arm {primary['arm']} - arm {primary['reference']}, held-out sampled accuracy at the budget, "
        f"{primary['n']} seeds, kernel path {analysis['kernel_path']}): {_points(primary)} points (95% t-interval), "
        f"t-test p {_p(primary['t_p'])}, sign-flip p {_p(primary['sign_flip_p'])} ({_flips(primary['n'])}): "
        f"{verdict}.",
    ]
    if analysis["secondaries"]:
        lines += [
            "",
            "| secondary arm | seeds | difference, points [95% t] | t-test p | sign-flip p | Holm p | finding |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
    for arm, c in analysis["secondaries"].items():
        lines.append(
            f"| {label(arm)} | {c['n']} | {_points(c)} | {_p(c['t_p'])} | {_p(c['sign_flip_p'])} | "
            f"{_p(c['holm_p'])} | {'yes' if c['finding'] else 'no'} |"
        )
    kinds = list(next(iter(analysis["breakdowns"].values())))
    lines += ["", "Breakdowns (descriptive), points [95% t]:", ""]
    lines += ["| arm | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for arm, rows in analysis["breakdowns"].items():
        lines.append(f"| {label(arm)} | " + " | ".join(_points(rows[kind]) for kind in kinds) + " |")
    lines += [
        "",
        "Cost units (descriptive): mean accuracy over the cost both runs of a pair reached, points [95% t];",
        "time to target, median (runs that reached it / runs):",
        "",
    ]
    lines += ["| arm | axis | area difference | median time, arm | median time, arm 3 |", "|---|---|---:|---:|---:|"]
    for arm, units in analysis["units"].items():
        for axis, words in AXES.items():
            cell = units[axis]
            times = [_median_cell(cell["time_to_target"][side]) for side in ("arm", "reference")]
            lines.append(f"| {label(arm)} | {words} | {_points(cell['area'])} | {times[0]} | {times[1]} |")
    power = analysis["power"]
    observed = "-" if power["at_observed_sd"] is None else f"{power['at_observed_sd']:.0%}"
    words = f"Power for a 2-point difference with {primary['n']} pairs: {observed} at the observed "
    words += f"paired SD ({100 * power['observed_sd']:.1f} points)"
    if "pilot_sigma" in power:
        words += f", {power['at_pilot_sigma']:.0%} at the pilot's ({100 * power['pilot_sigma']:.1f} points)"
    lines += ["", words + "."]
    if order := analysis.get("run_order"):
        lines += ["", order_line({int(seed): arms for seed, arms in order.items()})]
    models = analysis.get("cpu_models", [])
    if len(models) == 1:
        lines += ["", f"Every run on one CPU model ({models[0]})."]
    elif models:
        blocked = "; ".join(f"{model}: {_points(c)} ({c['n']} seeds)" for model, c in analysis["by_cpu_model"].items())
        lines += [
            "",
            f"The runs span {len(models)} CPU models; the primary within each (exploratory): {blocked or '-'}.",
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# Amendment 3: trl-dapo profile's threshold, from the saving predicted at each seed's warm start and the seed's gain
# ---------------------------------------------------------------------------------------------------------------------

BAND_POINTS = 1001  # the covered range is scanned at this many savings for the threshold


def predicted_saving(check: dict) -> dict:
    """What `trl-dapo profile` would predict at a seed's warm start: from ``check`` (one seed's entry of
    ``ablation.py --check-task``'s task_check.json: each RL prompt's successes in GRPO's group), the share of GRPO's
    completions per informative group that screening with k = 4 saves, with its 95% bootstrap interval.

    >>> check = {"grpo_groups": {"group_size": 8, "successes": [0] * 5 + [4] * 5}}
    >>> round(predicted_saving(check)["saving"], 3)
    0.243
    """
    from trl_dapo_ext.preflight.recommend import estimate_costs

    groups = check["grpo_groups"]
    successes, group = groups["successes"], groups["group_size"]
    points, intervals = estimate_costs(successes, [group] * len(successes), group)
    low, high = intervals["saving"]
    return {"saving": points["saving"], "low": low, "high": high, "prompts": len(successes)}


def mean_gain_band(savings: Sequence[float], gains: Sequence[float], at: Sequence[float], level: float = 0.95) -> dict:
    """Least squares ``gain = a + b (saving - mean saving)`` and the pointwise ``level`` confidence band of the mean
    gain at each saving of ``at`` (t with n - 2 degrees of freedom).

    >>> band = mean_gain_band([0.1, 0.2, 0.3], [0.0, 0.01, 0.02], [0.2])
    >>> round(band["slope"], 6), round(band["mean"][0], 6), round(band["low"][0], 6)
    (0.1, 0.01, 0.01)
    """
    x, y = np.asarray(savings, dtype=float), np.asarray(gains, dtype=float)
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        raise ValueError(f"the relation needs at least 3 seeds at two or more savings, got {n}")
    centre = x.mean()
    sxx = float(((x - centre) ** 2).sum())
    slope = float(((x - centre) * (y - y.mean())).sum() / sxx)
    residuals = y - (y.mean() + slope * (x - centre))
    s = math.sqrt(float((residuals**2).sum()) / (n - 2))
    where = np.asarray(at, dtype=float)
    mean = y.mean() + slope * (where - centre)
    t = t_quantile(1 - (1 - level) / 2, n - 2)
    half = t * s * np.sqrt(1 / n + (where - centre) ** 2 / sxx)
    return {
        "n": n,
        "intercept_at_mean": float(y.mean()),
        "mean_saving": float(centre),
        "slope": slope,
        "residual_sd": s,
        "sxx": sxx,
        "t": t,
        "at": where.tolist(),
        "mean": mean.tolist(),
        "low": (mean - half).tolist(),
        "high": (mean + half).tolist(),
    }


def profile_threshold(savings: Sequence[float], gains: Sequence[float], margin: float = EFFECT) -> dict:
    """Amendment 3: the relation of the primary gain to the predicted saving over the study seeds, and what
    `trl-dapo profile` may say from it: the threshold (the smallest covered saving from which the band's lower bound
    stays above 0 up to the largest saving measured), or, without one, "no measurable difference expected" (the band
    inside +-``margin`` over the whole covered range) or "not determined by the study".

    >>> out = profile_threshold([0.1, 0.2, 0.3, 0.4], [0.0, 0.02, 0.04, 0.06])
    >>> out["answer"], round(out["threshold"], 3)
    ('screening from the threshold', 0.1)
    >>> profile_threshold([0.1, 0.2, 0.3, 0.4], [0.001, -0.002, 0.002, -0.001])["answer"]
    'no measurable difference expected'
    """
    low_s, high_s = min(savings), max(savings)
    grid = np.linspace(low_s, high_s, BAND_POINTS)
    band = mean_gain_band(savings, gains, grid)
    above = np.asarray(band["low"]) > 0
    # the first grid point from which every point up to the largest saving is above 0
    threshold = None
    if above[-1]:
        start = len(above) - 1
        while start > 0 and above[start - 1]:
            start -= 1
        threshold = float(grid[start])
    if threshold is not None:
        answer = "screening from the threshold"
    elif min(band["low"]) >= -margin and max(band["high"]) <= margin:
        answer = "no measurable difference expected"
    else:
        answer = "not determined by the study"
    summary = mean_gain_band(savings, gains, [low_s, band["mean_saving"], high_s])
    return {
        "points": [[float(s), float(g)] for s, g in zip(savings, gains)],
        "covered": [float(low_s), float(high_s)],
        "slope": band["slope"],
        "residual_sd": band["residual_sd"],
        # what trl-dapo profile needs to give the band at any saving (trl_dapo_ext.preflight.recommend.Evidence)
        "fit": {
            key: band[key] for key in ("n", "mean_saving", "intercept_at_mean", "slope", "residual_sd", "sxx", "t")
        },
        "band": {key: summary[key] for key in ("at", "mean", "low", "high")},
        "threshold": threshold,
        "answer": answer,
    }


def study_profile_threshold(results: dict, checks: dict) -> dict:
    """`profile_threshold` on a study: each seed's predicted saving (its entry of ``checks``, task_check.json's
    ``seeds``) against its primary difference; every seed with both."""
    arm, reference = PRIMARY
    gains = paired(results["runs"], arm, reference, lambda run: run["accuracy_after"]["sampled"])
    seeds = [seed for seed in gains if str(seed) in checks]
    predicted = {seed: predicted_saving(checks[str(seed)]) for seed in seeds}
    out = profile_threshold([predicted[s]["saving"] for s in seeds], [gains[s] for s in seeds])
    return {"seeds": seeds, "predicted": predicted, **out}


def threshold_report(relation: dict) -> str:
    """Amendment 3's result as markdown: the per-seed points, the band at the ends and the middle, the answer."""
    lines = [
        "| seed | predicted saving [95%] | gain, arm 10 - arm 3 (points) |",
        "|---:|---:|---:|",
    ]
    for seed, (saving, gain) in zip(relation["seeds"], relation["points"]):
        p = relation["predicted"][seed]
        lines.append(f"| {seed} | {saving:.1%} [{p['low']:.1%}, {p['high']:.1%}] | {100 * gain:+.1f} |")
    band = relation["band"]
    cells = [
        f"{s:.1%}: {100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        for s, m, lo, hi in zip(band["at"], band["mean"], band["low"], band["high"])
    ]
    low, high = relation["covered"]
    threshold = "none" if relation["threshold"] is None else f"{relation['threshold']:.1%}"
    lines += [
        "",
        f"Fit: {relation['slope']:+.2f} points of gain per point of saving; mean gain (95% band) at the "
        f"lowest, mean and highest saving: {'; '.join(cells)}. Covered savings {low:.1%}-{high:.1%}; threshold "
        f"{threshold}: **{relation['answer']}**.",
    ]
    return "\n".join(lines) + "\n"


def remaining_runs(kept: Path, seeds: int = STUDY_SEEDS, secondary_seeds: int = SECONDARY_SEEDS) -> dict:
    """What the study still lacks, from the records kept per seed (``kept/seedN/results.json``, as
    benchmarks/results/study/seeds holds them): per seed, the protocol arms not yet run, and the seeds whose
    warm-start check (amendment 3) is missing.

    >>> remaining_runs(Path("/nonexistent"), seeds=3, secondary_seeds=1)["runs"]
    {0: [3, 10, 1, 4, 7, 11, 8], 1: [3, 10], 2: [3, 10]}
    """
    protocol = [*PRIMARY[::-1], *SECONDARIES]
    runs, checks = {}, []
    for seed in range(seeds):
        folder = kept / f"seed{seed}"
        wanted = protocol if seed < secondary_seeds else list(PRIMARY[::-1])
        path = folder / "results.json"
        done = {run["arm"] for run in json.loads(path.read_text())["runs"]} if path.exists() else set()
        if missing := [arm for arm in wanted if arm not in done]:
            runs[seed] = missing
        if not (folder / "task_check.json").exists():
            checks.append(seed)
    return {"runs": runs, "checks": checks}


def order_line(order: dict[int, list[int]]) -> str:
    """The report's line on each pair's run order (amendment 5).

    >>> order_line({0: [3, 10], 1: [10, 3], 2: [3, 10]})
    'Run order within each pair (amendment 5): arm 3 first on seeds 0, 2; arm 10 first on seeds 1.'
    """
    first = {arm: [seed for seed, arms in order.items() if arms[0] == arm] for arm in PRIMARY[::-1]}
    parts = [f"arm {arm} first on seeds {', '.join(map(str, seeds))}" for arm, seeds in first.items() if seeds]
    return f"Run order within each pair (amendment 5): {'; '.join(parts)}."


def seed_rule(results: dict) -> dict:
    """Section 5 on the pilot: sigma, the SD of the paired differences (arm 10 - arm 3) in final sampled accuracy over
    the pilot seeds, the number of study seeds it asks for, and the power that number has at that sigma."""
    arm, reference = PRIMARY
    lrs = {results["plan"]["demo"]["learning_rate"]}
    diffs = paired(results["runs"], arm, reference, lambda run: run["accuracy_after"]["sampled"])
    if len(diffs) < 2:
        raise SystemExit(f"the seed rule needs arms {arm} and {reference} on at least two pilot seeds, got {diffs}")
    sigma = statistics.stdev(diffs.values())
    unbounded = seeds_for_power(sigma, bounds=(2, 10**6))
    n = min(max(unbounded, MIN_SEEDS), MAX_SEEDS)
    power = paired_t_power(n, sigma) if sigma > 0 else 1.0
    text = (
        f"Pilot seeds {sorted(diffs)} at lr {lrs.pop():g}: paired differences (arm {arm} - arm {reference}) "
        + ", ".join(f"{100 * d:+.1f}" for d in diffs.values())
        + f" points; sigma {100 * sigma:.2f} points. Guenther's n for 80% power at 2 points: {unbounded}; the study "
        f"runs {n} seeds (bounds {MIN_SEEDS}-{MAX_SEEDS}), with {power:.0%} power at this sigma."
    )
    # the largest paired SD at which n seeds still have the protocol's power: what the design covers beyond the pilot
    low, high = 1e-4, 0.2
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if paired_t_power(n, middle) >= POWER else (low, middle)
    text += (
        f" {n} seeds keep {POWER:.0%} power for {100 * EFFECT:.0f} points up to a paired SD of {100 * low:.1f} points."
    )
    pilot_runs = [without_per_step(run) for run in results["runs"] if run["arm"] in (arm, reference)]
    return {
        "differences": diffs,
        "sigma": sigma,
        "guenther_n": unbounded,
        "seeds": n,
        "power": power,
        "largest_sd_at_power": low,
        "text": text,
        "runs": pilot_runs,
    }


def lr_table(rows: Sequence[dict]) -> str:
    """The sweep as a markdown table: one row per lr, the mean sampled accuracy at every evaluation."""
    grid = rows[0]["completions"]
    head = ["lr", "seeds", *(f"{x:,}" for x in grid), "lowest minus warm start", "qualifies"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(grid) + 1) + "---|"]
    for row in sorted(rows, key=lambda r: -r["lr"]):
        cells = [f"{row['lr']:g}", ", ".join(map(str, row["seeds"]))]
        cells += [f"{100 * y:.1f}" for y in row["mean_sampled"]]
        cells += [f"{-100 * row['largest_fall'] + 0.0:+.1f}", "yes" if row["qualifies"] else "no"]
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
        runs += [{**without_per_step(run), "learning_rate": lr} for run in results["runs"]]
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
    study = commands.add_parser("analyze", help="section 7's analysis of a study's results.json")
    study.add_argument("results", type=Path, help="the study's results.json (ablation.py --merge of its folders)")
    study.add_argument("--pilot-sigma", type=float, help="the pilot's paired SD, for the design's power")
    study.add_argument("--save", type=Path, help="write DIR/study_analysis.json and DIR/study_analysis.md")
    study.add_argument(
        "--run-order",
        type=Path,
        help="a JSON file whose 'order' maps each seed to its primary pair's arms in the order run (amendment 5; "
        "benchmarks/results/study/run_order.json): listed in the report",
    )
    study.add_argument(
        "--exploratory",
        metavar="WHAT",
        help="an exploratory pair (e.g. 'G = 16'): reported as such, its reading not a finding; saved as "
        "DIR/exploratory_analysis.{json,md}",
    )
    seeds = commands.add_parser("seeds", help="section 5's seed rule from the pilot's arms 3 and 10 at the chosen lr")
    seeds.add_argument("folder", type=Path, help="the chosen lr's pilot folder, holding arms 3 and 10")
    seeds.add_argument("--save", type=Path, help="write DIR/seed_rule.json and DIR/seed_rule.md")
    threshold = commands.add_parser(
        "profile-threshold", help="amendment 3: trl-dapo profile's threshold from the predicted savings and the gains"
    )
    threshold.add_argument("results", type=Path, help="the study's results.json")
    threshold.add_argument("checks", nargs="+", type=Path, help="task_check.json files of the study seeds")
    threshold.add_argument("--save", type=Path, help="write DIR/profile_threshold.json and DIR/profile_threshold.md")
    status = commands.add_parser("status", help="the protocol runs and warm-start checks not yet kept")
    status.add_argument(
        "kept", type=Path, help="the kept records, one folder per seed (benchmarks/results/study/seeds)"
    )
    ns = parser.parse_args(argv)
    if ns.command == "status":
        left = remaining_runs(ns.kept)
        for seed, arms in left["runs"].items():
            print(f"seed {seed}: arms {' '.join(map(str, arms))} to run")
        print(
            f"{sum(map(len, left['runs'].values()))} runs left; warm-start checks missing: {left['checks'] or 'none'}"
        )
        return 0
    if ns.command == "profile-threshold":
        checks = {}
        for path in ns.checks:
            checks.update(json.loads(path.read_text())["seeds"])
        relation = study_profile_threshold(json.loads(ns.results.read_text()), checks)
        text = threshold_report(relation)
        print(text)
        if ns.save:
            ns.save.mkdir(parents=True, exist_ok=True)
            (ns.save / "profile_threshold.md").write_text(text)
            (ns.save / "profile_threshold.json").write_text(json.dumps(relation, indent=1) + "\n")
        return 0
    if ns.command == "seeds":
        rule = seed_rule(json.loads((ns.folder / "results.json").read_text()))
        print(rule["text"])
        if ns.save:
            ns.save.mkdir(parents=True, exist_ok=True)
            (ns.save / "seed_rule.md").write_text(rule["text"] + "\n")
            (ns.save / "seed_rule.json").write_text(json.dumps(rule, indent=1) + "\n")
        return 0
    if ns.command == "analyze":
        results = json.loads(ns.results.read_text())
        analysis = analyze(results, ns.pilot_sigma)
        if ns.run_order:
            analysis["run_order"] = json.loads(ns.run_order.read_text())["order"]
        names = {run["arm"]: run.get("arm_name", "") for run in results["runs"]}
        text = report(analysis, names, ns.exploratory)
        print(text)
        if ns.save:
            ns.save.mkdir(parents=True, exist_ok=True)
            name = "exploratory_analysis" if ns.exploratory else "study_analysis"
            (ns.save / f"{name}.md").write_text(text)
            (ns.save / f"{name}.json").write_text(json.dumps(analysis, indent=1) + "\n")
        return 0
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
