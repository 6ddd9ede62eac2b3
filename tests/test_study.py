"""`benchmarks/study.py`: the pre-registered study's rules (benchmarks/protocol.md) against brute force and
simulation: the seed rule against the exact power, the power against simulated t-tests, the sign-flip test's Monte
Carlo branch against its exact one, and the lr rule on results folders."""

from __future__ import annotations

import doctest
import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from helpers import load_benchmark

study = load_benchmark("study")
ablation = load_benchmark("ablation")


def test_the_doctests_hold():
    assert doctest.testmod(study).failed == 0


@pytest.mark.parametrize("sigma", [0.02, 0.03, 0.045, 0.06])
def test_the_seed_rule_gives_the_fewest_pairs_with_80_percent_power(sigma):
    """Guenther's n reaches 80% exact power and one pair fewer does not (unbounded), for the spreads the mixed
    task's arms showed (paired SD 1.2 to 4.4 points)."""
    n = study.seeds_for_power(sigma, bounds=(2, 1000))
    assert study.paired_t_power(n, sigma) >= 0.80
    assert study.paired_t_power(n - 1, sigma) < 0.80


def test_the_power_is_what_simulated_t_tests_reject():
    """20,000 simulated studies of 8 pairs (SD 3 points, true difference 2): the share the two-sided t-test rejects
    at 5% is the computed power, within 3 standard errors."""
    n, sigma, rng = 8, 0.03, random.Random(0)
    critical = ablation.t_quantile(0.975, n - 1)
    trials, rejected = 20_000, 0
    for _ in range(trials):
        d = [rng.gauss(0.02, sigma) for _ in range(n)]
        rejected += abs(statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(n))) > critical
    power = study.paired_t_power(n, sigma)
    assert abs(rejected / trials - power) < 3 * math.sqrt(power * (1 - power) / trials)


def test_the_power_at_zero_effect_is_the_level():
    assert study.paired_t_power(12, 0.03, effect=0.0) == pytest.approx(0.05, abs=1e-4)


def test_the_sign_flip_tests_branches_agree(monkeypatch):
    """The same 14 differences: the drawn assignments' p (forced by lowering the exact limit) is the exact p within
    3 standard errors; with every difference of one sign the exact p is 2 / 2^n."""
    rng = random.Random(1)
    diffs = [rng.gauss(0.01, 0.02) for _ in range(14)]
    exact = study.sign_flip_p(diffs)
    monkeypatch.setattr(study, "EXACT_SIGN_FLIP_PAIRS", 5)
    drawn = study.sign_flip_p(diffs, draws=40_000)
    assert abs(drawn - exact) < 3 * math.sqrt(exact * (1 - exact) / 40_000) + 1e-4
    monkeypatch.undo()
    assert study.sign_flip_p([0.01] * 6) == 2 / 2**6


def _folder(tmp_path: Path, lr: float, curves: dict[int, list[float]], kernel: str = "avx2", arm: int = 3) -> Path:
    folder = tmp_path / f"lr{lr:g}"
    folder.mkdir()
    runs = [
        {
            "arm": arm,
            "seed": seed,
            "machine": {"kernel_path": kernel},
            "curve": [{"completions": 6400 * i, "accuracy": {"sampled": y}} for i, y in enumerate(ys)],
        }
        for seed, ys in curves.items()
    ]
    (folder / "results.json").write_text(json.dumps({"plan": {"demo": {"learning_rate": lr}}, "runs": runs}))
    return folder


def test_the_lr_rule_takes_the_largest_lr_whose_mean_stays_within_2_points(tmp_path, capsys):
    """3e-4's mean falls 3 points (one seed's 6-point fall is averaged with a rise: the rule reads the mean), 1e-4's
    exactly 2, 3e-5's never: 1e-4 is chosen; the saved table and record say so."""
    folders = [
        _folder(tmp_path, 3e-4, {100: [0.60, 0.54, 0.70], 101: [0.50, 0.50, 0.60]}),
        _folder(tmp_path, 1e-4, {100: [0.60, 0.58, 0.66], 101: [0.50, 0.48, 0.58]}),
        _folder(tmp_path, 3e-5, {100: [0.60, 0.61, 0.62], 101: [0.50, 0.51, 0.52]}),
    ]
    assert study.main(["lr-pilot", *map(str, folders), "--save", str(tmp_path / "out")]) == 0
    assert "chosen lr: 0.0001" in capsys.readouterr().out
    saved = json.loads((tmp_path / "out" / "lr_pilot.json").read_text())
    assert saved["chosen_lr"] == 1e-4 and len(saved["runs"]) == 6
    assert [row["qualifies"] for row in saved["sweep"]] == [False, True, True]
    assert "| 0.0003 | 100, 101 | 55.0 | 52.0 | 65.0 | -3.0 | no |" in (tmp_path / "out" / "lr_pilot.md").read_text()


def test_the_lr_pilot_refuses_mixed_kernels_other_arms_and_unequal_grids(tmp_path):
    with pytest.raises(SystemExit, match="kernel paths"):
        study.lr_pilot(
            [_folder(tmp_path, 3e-4, {100: [0.5, 0.5]}), _folder(tmp_path, 1e-4, {100: [0.5, 0.5]}, "default")]
        )
    with pytest.raises(SystemExit, match="arm 3 only"):
        study.lr_pilot([_folder(tmp_path, 3e-5, {100: [0.5, 0.5]}, arm=10)])
    with pytest.raises(ValueError, match="different completions"):
        study.lr_pilot([_folder(tmp_path, 1e-5, {100: [0.5, 0.5], 101: [0.5, 0.5, 0.5]})])


def test_no_qualifying_lr_says_to_extend_the_grid(tmp_path, capsys):
    study.main(["lr-pilot", str(_folder(tmp_path, 3e-4, {100: [0.6, 0.5, 0.7]}))])
    assert "no lr qualifies: extend the grid downward" in capsys.readouterr().out


# --- section 7's analysis ----------------------------------------------------------------------------------------------

AXES = ("completions", "generated_tokens", "cpu_s", "decode_steps")


def _run(arm: int, seed: int, ys: list[float], cost: float = 1.0, kernel: str = "avx2", slow: float = 1.0) -> dict:
    """A record whose sampled accuracy is ``ys`` at evaluations 6,400 completions apart; every cost axis grows with
    the completions times ``cost`` (an arm that pays more per completion on each axis)."""
    curve = [
        {
            "completions": 6400 * i,
            "generated_tokens": 6400 * i * 16 * cost,
            "cpu_s": 10.0 * i * cost * slow,
            "decode_steps": 50 * i * 18 * cost,
            "accuracy": {"sampled": y, "greedy": y + 0.1, "pass_at_k": y + 0.2},
            "accuracy_by_class": {"2-digit": {"sampled": y + 0.2}, "5-digit": {"sampled": y - 0.2}},
        }
        for i, y in enumerate(ys)
    ]
    return {
        "arm": arm,
        "seed": seed,
        "machine": {"kernel_path": kernel},
        "curve": curve,
        "accuracy_after": curve[-1]["accuracy"],
        "eval_s": 5.0 * (len(ys) - 1) * slow,  # one evaluation per point after the warm start's
    }


def _study(primary: list[float], secondary: list[float]) -> dict:
    """Arm 3 rises from 0.5 to 0.6 on every seed; arms 10 and 1 end ``primary`` / ``secondary`` points above it."""
    runs = []
    for seed, (d10, d1) in enumerate(zip(primary, secondary)):
        runs += [
            _run(3, seed, [0.5, 0.55, 0.6]),
            _run(10, seed, [0.5, 0.55 + d10, 0.6 + d10]),
            _run(1, seed, [0.5, 0.55 + d1, 0.6 + d1], cost=2.0),
        ]
    return {"runs": runs}


def test_the_analysis_pairs_by_seed_and_reads_the_primary_as_the_protocol_says():
    diffs = [0.01, 0.03, 0.02, 0.04, 0.02, 0.03]
    results = _study(diffs, [-0.01, 0.01, 0.0, -0.02, 0.01, 0.0])
    results["runs"].append(_run(10, 99, [0.5, 0.9, 0.9]))  # arm 3 never ran seed 99: not a pair
    analysis = study.analyze(results, pilot_sigma=0.03)
    primary = analysis["primary"]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = ablation.t_quantile(0.975, 5) * sd / math.sqrt(6)
    assert primary["n"] == 6 and primary["mean"] == pytest.approx(mean)
    assert (primary["low"], primary["high"]) == pytest.approx((mean - half, mean + half))
    assert primary["sign_flip_p"] == 2 / 64 and primary["reading"] == "better"
    second = analysis["secondaries"][1]
    assert second["holm_p"] == second["sign_flip_p"] and not second["finding"]  # a family of one
    assert analysis["breakdowns"][10]["class 5-digit"]["mean"] == pytest.approx(mean)
    assert analysis["power"]["at_pilot_sigma"] == pytest.approx(study.paired_t_power(6, 0.03))
    text = study.report(analysis, {10: "pipelined screening"})
    assert "**better**" in text and "| 10 pipelined screening | generated tokens |" in text


def test_an_exploratory_pair_is_reported_as_such(tmp_path, capsys):
    """The G = 16 pair: arms 3 and 10 only, no secondary table, its reading not in bold nor called a finding."""
    results = {"runs": [r for r in _study([0.03, 0.02, 0.04, 0.03, 0.02, 0.03], [0.0] * 6)["runs"] if r["arm"] != 1]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    out = tmp_path / "saved"
    assert study.main(["analyze", str(tmp_path / "results.json"), "--exploratory", "G = 16", "--save", str(out)]) == 0
    text = (out / "exploratory_analysis.md").read_text()
    assert text.startswith("Exploratory, G = 16 (arm 10 - arm 3") and "**" not in text.split("\n")[0]
    assert "better (exploratory: not a protocol finding)" in text and "secondary arm" not in text
    assert not (out / "study_analysis.md").exists() and text in capsys.readouterr().out


def test_the_readings_of_a_null_and_a_worse_primary():
    flat = study.analyze(_study([0.001, -0.002, 0.0, 0.002, -0.001], [0.0] * 5))["primary"]["reading"]
    assert flat == "no difference detected; equivalent within 2 points"
    worse = study.analyze(_study([-0.03, -0.02, -0.04, -0.03, -0.05, -0.02], [0.0] * 6))["primary"]["reading"]
    assert worse == "worse"
    # an interval reaching past -2 points is not equivalence, even when its upper end is inside
    assert study.reading({"low": -0.03, "high": 0.01, "sign_flip_p": 0.4}) == "no difference detected"
    assert study.reading({"low": -0.01, "high": 0.03, "sign_flip_p": 0.4}) == "no difference detected"


def test_holm_runs_over_the_secondaries_sign_flip_p():
    results = _study([0.0] * 6, [0.02] * 6)
    for seed in range(6):
        results["runs"].append(_run(4, seed, [0.5, 0.5, 0.6 + (0.01 if seed % 2 else -0.01)]))
    analysis = study.analyze(results)
    raw = {arm: c["sign_flip_p"] for arm, c in analysis["secondaries"].items()}
    assert {arm: c["holm_p"] for arm, c in analysis["secondaries"].items()} == ablation.holm(raw)
    assert raw[1] == 2 / 64 and analysis["secondaries"][1]["holm_p"] == pytest.approx(4 / 64)


def test_the_areas_and_times_to_target_match_a_fine_grid():
    """Brute force: the curve sampled on a fine grid (linear between evaluations) gives the same mean accuracy up
    to the end, and the first grid point at or above the target within one grid step."""
    run = _run(10, 0, [0.5, 0.52, 0.7, 0.61])
    curve = run["curve"]
    for axis in AXES:
        end = curve[-1][axis] * 0.83
        xs = [end * (i + 0.5) / 20_000 for i in range(20_000)]
        brute = statistics.fmean(ablation.sampled_at(curve, axis, x) for x in xs)
        assert study.area_per_unit(curve, axis, end) == pytest.approx(brute, abs=1e-6)
        step = curve[-1][axis] / 20_000
        first = next(i * step for i in range(20_001) if ablation.sampled_at(curve, axis, i * step) >= 0.6)
        assert study.time_to(curve, axis, 0.6) == pytest.approx(first, abs=step)
    assert study.time_to(curve, "completions", 0.75) is None


def test_the_cost_units_pair_the_shorter_run_and_count_censored_runs():
    """Arm 1 pays twice arm 3's cost per completion on every axis but the completions: on those axes its area is
    taken over half of arm 3's run, where both have run."""
    analysis = study.analyze(_study([0.0] * 4, [0.0] * 4))
    units = analysis["units"][1]
    assert units["completions"]["area"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert units["cpu_s"]["area"]["mean"] < 0  # arm 1 reached less accuracy per CPU second
    reached = units["cpu_s"]["time_to_target"]
    assert reached["arm"]["reached"] == reached["reference"]["reached"] == 4
    # the target is the warm start plus half of arm 3's gain (0.55), which arm 3 reaches at its first evaluation
    assert reached["reference"]["median"] == pytest.approx(10.0) and reached["arm"]["median"] == pytest.approx(20.0)
    assert study._median_censored([1.0, None, 3.0]) == 3.0 and study._median_censored([1.0, None]) is None


def test_the_speed_free_unit_cancels_the_machines_speed_that_cpu_seconds_carry():
    """Amendment 4: arm 10 learns as arm 3 does at the same cost, but every arm-10 run was made on a machine 1.5x
    slower. CPU seconds read that as a loss; CPU seconds over the run's own evaluation time do not."""
    runs = []
    for seed in range(4):
        runs += [_run(3, seed, [0.5, 0.55, 0.6]), _run(10, seed, [0.5, 0.55, 0.6], slow=1.5)]
    analysis = study.analyze({"runs": runs})
    units = analysis["units"][10]
    assert units["cpu_s"]["area"]["mean"] < -0.01
    assert units["cpu_evaluations"]["area"]["mean"] == pytest.approx(0.0, abs=1e-12)
    times = units["cpu_evaluations"]["time_to_target"]
    assert times["arm"]["median"] == pytest.approx(times["reference"]["median"]) == pytest.approx(2.0)
    row = "| 10 | training CPU s per evaluation's wall s (amendment 4) | +0.0 [+0.0, +0.0] |"
    assert row in study.report(analysis)


def test_the_analysis_refuses_runs_on_two_kernel_paths(tmp_path):
    results = _study([0.01, 0.02], [0.0, 0.0])
    results["runs"][0]["machine"]["kernel_path"] = "default"
    with pytest.raises(SystemExit, match="kernel paths"):
        study.analyze(results)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_study([0.01, 0.02, 0.0], [0.0, 0.01, 0.0])))
    assert study.main(["analyze", str(path), "--save", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "study_analysis.md").read_text().startswith("**Primary** (arm 10 - arm 3")


def test_runs_on_several_cpu_models_get_the_primary_blocked_on_the_model_as_exploratory():
    """Section 6: the CPU model is recorded; one model is said, several give the primary within each model."""
    results = _study([0.01, 0.03, 0.02, 0.04], [0.0] * 4)
    for run in results["runs"]:
        run["machine"]["cpu"] = "Xeon A"
    assert study.report(study.analyze(results)).rstrip().endswith("Every run on one CPU model (Xeon A).")
    for run in results["runs"]:
        run["machine"]["cpu"] = "Xeon A" if run["seed"] < 2 else "Xeon B"
    analysis = study.analyze(results)
    assert analysis["cpu_models"] == ["Xeon A", "Xeon B"]
    assert analysis["by_cpu_model"]["Xeon A"]["mean"] == pytest.approx(0.02)
    assert analysis["by_cpu_model"]["Xeon B"]["mean"] == pytest.approx(0.03)
    assert "span 2 CPU models; the primary within each (exploratory): Xeon A: +2.0" in study.report(analysis)


def test_the_seed_rule_reads_the_pilots_paired_spread(tmp_path, capsys):
    """Pilot differences of +1, +7 and -3 points (SD 5.0): Guenther asks for 52 pairs, the study runs 40 and states
    their power; a spread of 0.5 points runs the floor of 20."""
    runs = [_run(3, s, [0.5, 0.6]) for s in (100, 101, 102)]
    runs += [_run(10, s, [0.5, 0.6 + d]) for s, d in zip((100, 101, 102), (0.01, 0.07, -0.03))]
    folder = tmp_path / "lr1e-4"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"plan": {"demo": {"learning_rate": 1e-4}}, "runs": runs}))
    assert study.main(["seeds", str(folder), "--save", str(tmp_path / "out")]) == 0
    rule = json.loads((tmp_path / "out" / "seed_rule.json").read_text())
    sigma = statistics.stdev([0.01, 0.07, -0.03])
    assert rule["sigma"] == pytest.approx(sigma) and rule["guenther_n"] == study.seeds_for_power(
        sigma, bounds=(2, 999)
    )
    assert rule["guenther_n"] == 52 and rule["seeds"] == 40
    assert rule["power"] == pytest.approx(study.paired_t_power(40, sigma)) and rule["power"] < 0.8
    assert "the study runs 40 seeds" in capsys.readouterr().out
    largest = rule["largest_sd_at_power"]  # the design's reach: 80% power up to this spread, not beyond
    assert study.paired_t_power(40, largest) >= 0.8 > study.paired_t_power(40, largest + 1e-4)
    small = [_run(3, s, [0.5, 0.6]) for s in (0, 1)] + [
        _run(10, s, [0.5, 0.6 + d]) for s, d in ((0, 0.01), (1, 0.015))
    ]
    assert study.seed_rule({"plan": {"demo": {"learning_rate": 1e-4}}, "runs": small})["seeds"] == 20


# --- the saved pilot, and the docs that quote it -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "results" / "study"


# --- amendment 3: trl-dapo profile's threshold ---------------------------------------------------------------------


def test_the_predicted_saving_is_the_profiles_estimate_from_each_prompts_successes():
    from trl_dapo_ext.preflight.recommend import estimate_costs

    successes = [0] * 30 + [3] * 20 + [8] * 10 + [6] * 15
    check = {"grpo_groups": {"group_size": 8, "successes": successes}}
    predicted = study.predicted_saving(check)
    points, intervals = estimate_costs(successes, [8] * len(successes), 8)
    assert predicted["saving"] == points["saving"] and (predicted["low"], predicted["high"]) == intervals["saving"]
    assert predicted["low"] <= predicted["saving"] <= predicted["high"] and predicted["prompts"] == 75


def test_the_mean_gain_band_is_least_squares_with_its_textbook_standard_error():
    rng = random.Random(3)
    x = [rng.uniform(0.1, 0.4) for _ in range(12)]
    y = [0.01 + 0.05 * v + rng.gauss(0, 0.01) for v in x]
    at = [0.1, 0.25, 0.4]
    band = study.mean_gain_band(x, y, at)
    design = np.column_stack([np.ones(12), x])
    coef, *_ = np.linalg.lstsq(design, np.asarray(y), rcond=None)
    residual = np.asarray(y) - design @ coef
    s2 = float(residual @ residual) / 10
    cov = s2 * np.linalg.inv(design.T @ design)
    for i, point in enumerate(at):
        row = np.array([1.0, point])
        se = math.sqrt(float(row @ cov @ row))
        assert band["mean"][i] == pytest.approx(float(row @ coef))
        assert band["high"][i] - band["mean"][i] == pytest.approx(ablation.t_quantile(0.975, 10) * se)
    with pytest.raises(ValueError, match="at least 3 seeds at two or more savings"):
        study.mean_gain_band([0.2, 0.2, 0.2], [0.0, 0.1, 0.0], at)


def test_the_band_covers_the_true_mean_gain_95_percent_of_the_time():
    """Statistical check: 2,000 simulated studies of 20 seeds with a known linear relation; the band at the lowest,
    middle and highest saving covers the true mean about 95% of the time (binomial SD about 0.5%)."""
    rng = np.random.default_rng(0)
    covered = np.zeros(3)
    draws = 2000
    for _ in range(draws):
        x = rng.uniform(0.15, 0.35, 20)
        y = 0.005 + 0.1 * x + rng.normal(0, 0.02, 20)
        at = [0.15, 0.25, 0.35]
        band = study.mean_gain_band(x, y, at)
        truth = 0.005 + 0.1 * np.asarray(at)
        covered += (np.asarray(band["low"]) <= truth) & (truth <= np.asarray(band["high"]))
    assert np.all(np.abs(covered / draws - 0.95) < 0.015), covered / draws


def test_the_threshold_is_where_the_band_starts_to_stay_above_zero():
    rng = random.Random(1)
    x = [0.1 + 0.3 * i / 19 for i in range(20)]
    y = [-0.02 + 0.2 * v + rng.gauss(0, 0.005) for v in x]  # the gain turns positive at a saving of 0.1
    out = study.profile_threshold(x, y)
    assert out["answer"] == "screening from the threshold" and out["covered"] == [min(x), max(x)]
    # brute force on the band: above 0 from the threshold to the largest saving, not just below it
    grid = np.linspace(min(x), max(x), 4001)
    band = study.mean_gain_band(x, y, grid)
    above = [s for s, low in zip(grid, band["low"]) if low > 0]
    assert out["threshold"] == pytest.approx(min(above), abs=(max(x) - min(x)) / 1000)
    assert all(low > 0 for s, low in zip(grid, band["low"]) if s >= out["threshold"] + 1e-3)
    assert 0.1 < out["threshold"] < 0.2
    # no relation and small gains: "no measurable difference expected"; no relation and wide noise: not determined
    flat = [0.001 * (-1) ** i for i in range(20)]
    assert study.profile_threshold(x, flat)["answer"] == "no measurable difference expected"
    assert study.profile_threshold(x, flat)["threshold"] is None
    noisy = [rng.gauss(0, 0.05) for _ in range(20)]
    assert study.profile_threshold(x, noisy)["answer"] == "not determined by the study"


def test_the_profile_reads_the_studys_relation_as_the_study_computed_it():
    """`Evidence.from_relation` (what trl-dapo profile uses) gives the study's band at any saving, and recommends
    screening from the threshold only; without a threshold it answers as the study did."""
    from trl_dapo_ext.preflight.recommend import NO_DIFFERENCE, Evidence, recommend_mode

    rng = random.Random(2)
    x = [0.15 + 0.2 * i / 19 for i in range(20)]
    config = {"dynamic_sampling": True, "dynamic_sampling_pipeline": True}
    relation = study.profile_threshold(x, [-0.03 + 0.25 * v + rng.gauss(0, 0.005) for v in x])
    evidence = Evidence.from_relation(relation, config, group_size=8)
    for saving in (0.1, 0.2, 0.3, 0.4):
        band = study.mean_gain_band(x, [g for _, g in relation["points"]], [saving])
        assert evidence.gain_at(saving) == pytest.approx((band["mean"][0], band["low"][0], band["high"][0]))
    assert evidence.threshold == relation["threshold"] and "threshold" in evidence.note
    many_hopeless = [0] * 60 + [4] * 40  # a large predicted saving: screening, with the mode the study measured
    choice = recommend_mode(many_hopeless, 8, 8, evidence=evidence)
    assert choice.saving >= evidence.threshold and choice.mode == "screening at GRPO budget"
    assert choice.config == config and "the study's fit expects a gain" in choice.reason
    few = recommend_mode([4] * 50, 8, 8, evidence=evidence)  # no saving: below the threshold
    assert few.mode == "plain GRPO" and few.saving < evidence.threshold
    assert recommend_mode(many_hopeless, 16, 16, evidence=evidence).mode == "plain GRPO"  # G = 16 not covered
    flat = study.profile_threshold(x, [0.001 * (-1) ** i for i in range(20)])
    null = Evidence.from_relation(flat, config, group_size=8)
    choice = recommend_mode(many_hopeless, 8, 8, evidence=null)
    assert choice.mode == NO_DIFFERENCE and choice.config == {"dynamic_sampling": False}
    beyond = recommend_mode([0] * 90 + [4] * 10, 8, 8, evidence=null)
    assert beyond.saving > max(x) and "outside the savings it measured" in beyond.reason  # an extrapolation, said


def test_the_study_threshold_pairs_each_seeds_gain_with_its_warm_start_check(tmp_path, capsys):
    # seeds 0-5: the gain grows with the share of all-wrong prompts (the saving); seed 6 has no check: left out
    runs, checks = [], {}
    for seed in range(7):
        gain = 0.01 * seed
        runs += [_run(3, seed, [0.5, 0.6]), _run(10, seed, [0.5, 0.6 + gain])]
        checks[str(seed)] = {"grpo_groups": {"group_size": 8, "successes": [0] * (10 * seed) + [4] * 40}}
    relation = study.study_profile_threshold({"runs": runs}, {k: v for k, v in checks.items() if k != "6"})
    assert relation["seeds"] == [0, 1, 2, 3, 4, 5]
    savings = [relation["predicted"][s]["saving"] for s in range(6)]
    assert savings == sorted(savings) and relation["slope"] > 0
    assert [g for _, g in relation["points"]] == pytest.approx([0.01 * s for s in range(6)])
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    (tmp_path / "task_check.json").write_text(json.dumps({"seeds": checks}))
    assert study.main(["profile-threshold", str(tmp_path / "results.json"), str(tmp_path / "task_check.json"),
                       "--save", str(tmp_path / "out")]) == 0  # fmt: skip
    saved = json.loads((tmp_path / "out" / "profile_threshold.json").read_text())
    assert saved["seeds"] == list(range(7)) and saved["answer"] in capsys.readouterr().out


def test_the_saved_lr_pilot_is_what_the_rule_gives_from_its_own_runs():
    saved = json.loads((SAVED / "lr_pilot.json").read_text())
    by_lr: dict[float, list] = {}
    for run in saved["runs"]:
        by_lr.setdefault(run["learning_rate"], []).append(run)
    assert sorted(by_lr) == [3e-5, 1e-4, 3e-4] and all(len(runs) == 3 for runs in by_lr.values())
    assert {run["seed"] for run in saved["runs"]} == {100, 101, 102} and {r["arm"] for r in saved["runs"]} == {3}
    assert {run["machine"]["kernel_path"] for run in saved["runs"]} == {"avx2"}
    rows = [study.lr_sweep_row(lr, runs) for lr, runs in by_lr.items()]
    assert study.chosen_lr(rows) == saved["chosen_lr"] == 1e-4
    table = (SAVED / "lr_pilot.md").read_text()
    assert study.lr_table(rows) in table and "chosen lr: 0.0001" in table


def test_the_docs_quote_the_lr_pilot_and_its_figures():
    page = (ROOT / "docs" / "ablation.md").read_text()
    table = (SAVED / "lr_pilot.md").read_text()
    assert table[table.index("| lr |") : table.index("\n\nchosen")] in page
    page = " ".join(page.split())  # the prose's line breaks
    saved = json.loads((SAVED / "lr_pilot.json").read_text())
    falls = []
    for run in saved["runs"]:
        if run["learning_rate"] == 3e-4:
            ys = [y for _, y in study.sampled_curve(run)]
            falls.append(100 * (ys[0] - min(ys)))
    assert f"every pilot seed first lost {min(falls):.1f} to {max(falls):.1f} points" in page
    final = {row["lr"]: row["final"] for row in saved["sweep"]}
    assert f"1e-4 ending {100 * (final[1e-4] - final[3e-5]):.1f} points above 3e-5" in page
    assert "The study runs at **1e-4**" in page


def test_the_saved_seed_rule_is_what_the_rule_gives_from_its_own_runs():
    saved = json.loads((SAVED / "seed_rule.json").read_text())
    runs = saved["runs"]
    assert {(r["arm"], r["seed"]) for r in runs} == {(a, s) for a in (3, 10) for s in (100, 101, 102)}
    assert {r["machine"]["kernel_path"] for r in runs} == {"avx2"}
    again = study.seed_rule({"plan": {"demo": {"learning_rate": 1e-4}}, "runs": runs})
    assert again["text"] == saved["text"] and again["seeds"] == saved["seeds"] == 20
    # the pilot's arm-3 runs are the lr pilot's at the chosen lr
    pilot = json.loads((SAVED / "lr_pilot.json").read_text())["runs"]
    chosen = {r["seed"]: r["accuracy_after"] for r in pilot if r["learning_rate"] == 1e-4}
    assert {r["seed"]: r["accuracy_after"] for r in runs if r["arm"] == 3} == chosen
    page = " ".join((ROOT / "docs" / "ablation.md").read_text().split())
    assert saved["text"] in page


def test_the_study_records_kept_so_far_follow_the_protocol():
    """Every kept study record (benchmarks/results/study/seeds/): the scratchpad task at the chosen lr and the full
    budget on the AVX2 path, a protocol arm, and one warm start per seed (every arm of a seed starts from the same
    held-out accuracy). They are study seeds, never pilot seeds."""
    folders = sorted((SAVED / "seeds").glob("seed*/results.json"))
    assert folders, "no study records kept yet"
    for path in folders:
        results = json.loads(path.read_text())
        plan = results["plan"]
        assert plan["task"] == "scratchpad" and plan["budget"] == 64_000 and plan["eval_every"] == 6_400
        assert plan["demo"]["learning_rate"] == 1e-4 and not plan["smoke"]
        runs = results["runs"]
        assert {r["machine"]["kernel_path"] for r in runs} == {"avx2"} and {r["threads"] for r in runs} == {1}
        assert {r["arm"] for r in runs} <= {3, 10, 1, 4, 7, 11, 8}
        (seed,) = {r["seed"] for r in runs}
        assert path.parent.name == f"seed{seed}" and seed < 100
        assert len({json.dumps(r["accuracy_before"], sort_keys=True) for r in runs}) == 1
        assert all(r["completions"] >= 64_000 for r in runs)


def test_the_kept_warm_start_checks_are_of_the_study_seeds_warm_starts():
    """Amendment 3's checks (benchmarks/results/study/seeds/seedN/task_check.json): all 4,000 RL prompts of the
    seed's own warm start (its held-out evaluation equals its runs'), on the AVX2 path, each prompt's successes in
    GRPO's group of 8 kept for the profile's estimator."""
    checks = sorted((SAVED / "seeds").glob("seed*/task_check.json"))
    assert checks, "no warm-start checks kept yet"
    for path in checks:
        saved = json.loads(path.read_text())
        (seed,) = [int(s) for s in saved["seeds"]]
        check = saved["seeds"][str(seed)]
        assert path.parent.name == f"seed{seed}" and check["machine"]["kernel_path"] == "avx2"
        groups = check["grpo_groups"]
        assert groups["group_size"] == 8 and len(groups["successes"]) == groups["overall"]["groups"] == 4_000
        runs = json.loads((path.parent / "results.json").read_text())["runs"]
        assert all(run["accuracy_before"] == check["held_out"] for run in runs)
        shares = groups["by_class"]
        for index, kind in enumerate(shares):  # the first 1,000 RL prompts of each class, easiest first
            mine = groups["successes"][1000 * index : 1000 * (index + 1)]
            assert sum(mine) / 8000 == pytest.approx(shares[kind]["pass_rate"])
        assert 0.0 <= study.predicted_saving(check)["saving"] < 1.0


def test_the_status_lists_the_protocol_runs_and_checks_not_yet_kept(tmp_path, capsys):
    for seed, arms in ((0, [3, 10, 1]), (12, [3, 10])):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"runs": [{"arm": arm, "seed": seed} for arm in arms]}))
    (tmp_path / "seed0" / "task_check.json").write_text("{}")
    left = study.remaining_runs(tmp_path)
    assert left["runs"][0] == [4, 7, 11, 8] and 12 not in left["runs"] and left["runs"][19] == [3, 10]
    assert left["checks"] == list(range(1, 20))
    assert study.main(["status", str(tmp_path)]) == 0
    assert f"{4 + 9 * 7 + 9 * 2} runs left" in capsys.readouterr().out


def test_the_report_lists_each_pairs_run_order(tmp_path):
    """Amendment 5: the report says which arm of each primary pair ran first, from the saved run order."""
    results = _study([0.01, 0.02, 0.03], [0.0] * 3)
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "order.json").write_text(json.dumps({"order": {"0": [3, 10], "1": [10, 3], "2": [3, 10]}}))
    args = ["analyze", str(tmp_path / "results.json"), "--run-order", str(tmp_path / "order.json")]
    assert study.main([*args, "--save", str(tmp_path)]) == 0
    text = (tmp_path / "study_analysis.md").read_text()
    assert "Run order within each pair (amendment 5): arm 3 first on seeds 0, 2; arm 10 first on seeds 1." in text
    assert json.loads((tmp_path / "study_analysis.json").read_text())["run_order"]["1"] == [10, 3]


def test_the_saved_run_order_is_the_one_amendment_5_states():
    """Seeds 17-19 ran arm 10 first, every other seed arm 3 first (amendments 4 and 5)."""
    order = json.loads((SAVED / "run_order.json").read_text())["order"]
    assert sorted(map(int, order)) == list(range(20))
    assert {int(seed) for seed, arms in order.items() if arms == [10, 3]} == {17, 18, 19}
    assert all(arms in ([3, 10], [10, 3]) for arms in order.values())


def _saved_study() -> tuple[dict, dict]:
    return json.loads((SAVED / "results.json").read_text()), json.loads((SAVED / "study_analysis.json").read_text())


def test_the_profile_uses_the_studys_saved_relation():
    """`trl-dapo profile`'s default evidence is the relation `profile-threshold` saved from the study's records and
    warm-start checks (amendment 3), recomputed here from the kept records: its fit, range, threshold and answer."""
    from trl_dapo_ext.preflight.recommend import EVIDENCE, PIPELINED_SCREENING, STUDY_RELATION, Evidence

    saved = json.loads((SAVED / "profile_threshold.json").read_text())
    checks = {}
    for path in (SAVED / "seeds").glob("seed*/task_check.json"):
        checks.update(json.loads(path.read_text())["seeds"])
    again = study.study_profile_threshold(_saved_study()[0], checks)  # the one results file: the kept records
    assert again["seeds"] == saved["seeds"] == list(range(20))
    assert again["fit"] == pytest.approx(saved["fit"]) and again["answer"] == saved["answer"]
    assert study.threshold_report(again) == (SAVED / "profile_threshold.md").read_text()
    assert {key: saved[key] for key in STUDY_RELATION} == STUDY_RELATION
    assert EVIDENCE == Evidence.from_relation(saved, PIPELINED_SCREENING, group_size=8)


def test_the_study_results_file_holds_every_kept_record():
    """The one results file is the kept per-seed records merged (per-step rows left out): each run once, nothing
    else, every record with its tokens, calls and CPU time."""
    results, _ = _saved_study()
    kept = [
        run for path in (SAVED / "seeds").glob("seed*/results.json") for run in json.loads(path.read_text())["runs"]
    ]
    key = lambda run: (run["seed"], run["arm"])  # noqa: E731
    assert [key(r) for r in results["runs"]] == sorted(map(key, kept))
    assert results["runs"] == [study.without_per_step(run) for run in sorted(kept, key=key)]
    for run in results["runs"]:
        assert run["generated_tokens"] > 0 and run["generation_calls"] > 0 and run["cpu_s"] > 0
        assert all("generated_tokens" in point and "cpu_s" in point for point in run["curve"])


def test_the_saved_study_analysis_is_what_the_protocols_analysis_gives():
    results, saved = _saved_study()
    sigma = json.loads((SAVED / "seed_rule.json").read_text())["sigma"]
    analysis = study.analyze(results, sigma)
    analysis["run_order"] = json.loads((SAVED / "run_order.json").read_text())["order"]
    assert json.loads(json.dumps(analysis)) == saved
    names = {run["arm"]: run.get("arm_name", "") for run in results["runs"]}
    assert study.report(analysis, names) == (SAVED / "study_analysis.md").read_text()
    assert saved["primary"]["n"] == 20 and {run["machine"]["kernel_path"] for run in results["runs"]} == {"avx2"}


def test_the_docs_quote_the_studys_report_and_threshold():
    page = (ROOT / "docs" / "ablation.md").read_text()
    assert (SAVED / "study_analysis.md").read_text() in page
    assert (SAVED / "profile_threshold.md").read_text() in page
    _, saved = _saved_study()
    primary = saved["primary"]
    interval = study._points(primary)
    prose = " ".join(page.split())
    assert f"(k = 4 probes, G = 8) ended {interval} points of held-out sampled accuracy" in prose
    assert f"paired SD {100 * primary['sd']:.1f} points" in prose
    found = [arm for arm, c in saved["secondaries"].items() if c["finding"]]
    assert ("a finding for arm" in prose) == bool(found)


def test_the_exploratory_g16_pair_is_what_analyze_gives_and_the_docs_quote_it():
    """The protocol's exploratory pair (G = 16, seeds 0-9): the saved report is `analyze --exploratory` of its one
    results file, and docs/ablation.md quotes it whole."""
    results = json.loads((SAVED / "g16" / "results.json").read_text())
    assert results["plan"]["demo"]["num_generations"] == 16
    assert sorted((run["seed"], run["arm"]) for run in results["runs"]) == [(s, a) for s in range(10) for a in (3, 10)]
    analysis = study.analyze(results)
    assert json.loads(json.dumps(analysis)) == json.loads((SAVED / "exploratory_analysis.json").read_text())
    names = {run["arm"]: run.get("arm_name", "") for run in results["runs"]}
    text = study.report(analysis, names, "G = 16")
    assert text == (SAVED / "exploratory_analysis.md").read_text() and analysis["primary"]["n"] == 10
    assert text in (ROOT / "docs" / "ablation.md").read_text()
    choosing = " ".join((ROOT / "docs" / "choosing.md").read_text().split())
    reading = analysis["primary"]["reading"]
    assert f"pipelined screening ended {study._points(analysis['primary'])}: {reading}." in choosing


def test_the_readme_and_the_decision_page_quote_the_study():
    """The README's Why tables and docs/choosing.md's answer give the saved analysis's intervals, row by row."""
    _, saved = _saved_study()
    cell = study._points  # the report's own format of an interval
    secondaries = saved["secondaries"]
    rows = {line.split("|")[1].strip(): line for line in (ROOT / "README.md").read_text().splitlines() if "|" in line}
    expected = {
        "pipelined screening at GRPO's budget, k = 4": saved["primary"],
        "the same with k = 2": secondaries["11"],
        "screening with refill": secondaries["8"],
        "refill (DAPO)": secondaries["4"],
        "zero-variance groups masked, no refill": secondaries["7"],
        "+ dynamic sampling (= DAPO)": secondaries["4"],
    }
    for name, comparison in expected.items():
        assert rows[name].rstrip(" |").endswith(cell(comparison)), name
    grpo = secondaries["1"]  # arm 1 - arm 3: the loss and clip-higher are the other way round
    assert cell({"mean": -grpo["mean"], "low": -grpo["high"], "high": -grpo["low"]}) in rows["+ token-level loss"]
    readme = (ROOT / "README.md").read_text()
    assert "docs/ablation.md#results-the-pre-registered-study" in readme and "docs/choosing.md" in readme
    page = " ".join((ROOT / "docs" / "choosing.md").read_text().split())
    assert f"ended {cell(saved['primary'])} points of held-out sampled accuracy above dynamic sampling off" in page
    assert f"Refill ended {cell(secondaries['4'])} points below dynamic sampling off" in page
    finding = "(Holm-adjusted finding)" if secondaries["4"]["finding"] else "(no Holm-adjusted finding)"
    assert f"{cell(secondaries['4'])} points below dynamic sampling off at the same generation {finding}" in page
