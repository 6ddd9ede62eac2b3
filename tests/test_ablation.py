"""`benchmarks/ablation.py` (issue 30): its arms are config changes only, its statistics are right, and `--smoke` runs
end to end with equal budgets and resumes. Never a gain: the smoke run's accuracies mean nothing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


ablation = load_benchmark("ablation")


def _changed(a: dict, b: dict) -> set[str]:
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


def test_arms_are_cumulative_config_changes_as_in_the_dapo_table():
    arms = {number: arm.config for number, arm in ablation.ARMS.items()}
    assert arms[1]["loss_type"] == "grpo" and arms[1]["epsilon_high"] is None and not arms[1]["dynamic_sampling"]
    assert arms[1]["scale_rewards"] == "group"
    assert _changed(arms[1], arms[2]) == {"epsilon_high"} and arms[2]["epsilon_high"] == 0.28
    assert _changed(arms[2], arms[3]) == {"loss_type"} and arms[3]["loss_type"] == "dapo"
    assert _changed(arms[3], arms[4]) == {"dynamic_sampling", "dynamic_sampling_on_exhausted"}
    assert _changed(arms[4], arms[5]) == {"advantage_estimator", "scale_rewards"}
    assert arms[5]["advantage_estimator"] == "loo" and arms[5]["scale_rewards"] == "none"
    assert _changed(arms[4], arms[6]) == {"dynamic_sampling_skip_window"}
    # the selection arms: each one switch on top of DAPO (arm 4)
    assert _changed(arms[4], arms[7]) == {"dynamic_sampling_fixed_budget"}
    assert _changed(arms[4], arms[8]) == {"dynamic_sampling_screen_generations"}
    assert _changed(arms[4], arms[9]) == {"dynamic_sampling_screen_generations", "dynamic_sampling_fixed_budget"}
    assert ablation.SELECTION_ARMS == [1, 3, 4, 6, 7, 8, 9]
    # pipelined screening (one generation call per step): arm 9 pipelined, then with k = 2
    assert _changed(arms[9], arms[10]) == {"dynamic_sampling_pipeline"} and arms[10]["dynamic_sampling_pipeline"]
    assert _changed(arms[10], arms[11]) == {"dynamic_sampling_screen_generations"}
    assert arms[11]["dynamic_sampling_screen_generations"] == 2
    assert ablation.PROTOCOL_ARMS[:2] == [3, 10] and sorted(ablation.PROTOCOL_ARMS[2:]) == [1, 4, 7, 8, 11]
    assert ablation.parse(["--output", "x", "--arms", "protocol"]).arms == ablation.PROTOCOL_ARMS


def test_arms_run_in_the_order_given():
    """Protocol amendment 4 makes arm 10 before arm 3 within a seed: `--arms 10 3` keeps that order (repeats once)."""
    assert ablation.parse(["--output", "x", "--arms", "10", "3", "10"]).arms == [10, 3]
    assert ablation.parse(["--output", "x", "--arms", "11", "protocol"]).arms == [11, 3, 10, 1, 4, 7, 8]


def test_generation_meter_counts_tokens_calls_and_each_calls_longest_completion():
    from reward_funcs import math_reward

    seen = []
    meter = ablation.GenerationMeter(lambda completions, **kwargs: seen.append(kwargs) or [1.0] * len(completions))
    assert meter(["a", "b"], completion_ids=[[1, 2, 3], [4]], answer=["1", "2"]) == [1.0, 1.0]
    meter(["c"], completion_ids=[[5, 6]], answer=["3"])
    assert meter.counts() == dict(generated_tokens=6, generation_calls=2, decode_steps=3 + 2)
    assert meter.completions == 3 and seen[1] == {"completion_ids": [[5, 6]], "answer": ["3"]}  # passed through
    with pytest.raises(TypeError, match="completion_ids"):
        meter(["d"], answer=["4"])
    assert ablation.GenerationMeter(math_reward).__name__ == "math_reward"  # the reward's metric names unchanged


def test_the_mixed_task_is_stratified_and_keeps_held_out_problems_out_of_training():
    from ablation_tasks import CLASSES, HELD_OUT_PER_CLASS, RL_PROMPTS, task_splits

    from trl_dapo_ext.cli.demo import DemoSettings

    splits = task_splits("mixed", DemoSettings(seed=3))
    assert splits.classes == CLASSES
    assert all(sum(r["class"] == c for r in splits.held_out) == HELD_OUT_PER_CLASS for c in CLASSES)
    assert {c: sum(r["class"] == c for r in splits.rl_rows) for c in CLASSES} == RL_PROMPTS
    held_out = {r["prompt"] for r in splits.held_out}
    sft = {r["prompt"] for r in splits.sft_rows}
    assert not held_out & sft and not held_out & {r["prompt"] for r in splits.rl_rows}
    for row in splits.rl_rows:  # easy RL prompts were warm-start problems; the others were never trained on
        assert (row["prompt"] in sft) == (row["class"] == "easy")
    for row in splits.held_out + splits.rl_rows:
        a, b = (int(x) for x in row["prompt"].rstrip("=").split("+"))
        assert row["answer"] == str(a + b)
        carry = a % 10 + b % 10 >= 10 or a // 10 + b // 10 >= 10
        assert {"easy": a < 100 and not carry, "medium": a < 100 and carry, "hard": a >= 100}[row["class"]]
    assert task_splits("mixed", DemoSettings(seed=3)) == splits  # seeded
    demo = task_splits("demo", DemoSettings(seed=3))
    assert demo.classes == ("all",) and len(demo.held_out) == 500


def test_the_scratchpad_task_grows_in_length_with_difficulty_and_keeps_held_out_problems_apart():
    from ablation_tasks import SCRATCHPAD, scratchpad_completion, task_splits

    from reward_funcs import math_reward
    from trl_dapo_ext.cli.demo import DemoSettings, build_tokenizer_and_model

    splits = task_splits("scratchpad", DemoSettings(seed=3))
    classes = tuple(SCRATCHPAD.classes)
    assert splits.classes == classes == ("2-digit", "3-digit", "4-digit", "5-digit")
    count = lambda rows, c: sum(r["class"] == c for r in rows)  # noqa: E731
    assert all(count(splits.held_out, c) == 1000 for c in classes)
    assert all(count(splits.sft_rows, c) == SCRATCHPAD.classes[c].warm_start for c in classes)
    assert all(count(splits.rl_rows, c) == SCRATCHPAD.classes[c].rl_prompts for c in classes)
    assert 0 < SCRATCHPAD.classes["5-digit"].warm_start < SCRATCHPAD.classes["4-digit"].warm_start  # a few hard rows
    prompts = [{r["prompt"] for r in rows} for rows in (splits.held_out, splits.sft_rows, splits.rl_rows)]
    assert sum(map(len, prompts)) == len(set().union(*prompts))  # distinct within and across the three splits
    assert len(task_splits("scratchpad", DemoSettings(seed=3), held_out_per_class=50).held_out) == 200
    assert task_splits("scratchpad", DemoSettings(seed=3)) == splits  # seeded
    tokenizer, _ = build_tokenizer_and_model("tiny", 0)
    lengths = {c: set() for c in classes}
    for row in splits.held_out + splits.sft_rows + splits.rl_rows:
        a, b = (int(x) for x in row["prompt"].rstrip("=").split("+"))
        digits = int(row["class"].split("-")[0])
        assert len(str(a)) == len(str(b)) == digits and row["answer"] == str(a + b)
        assert row["completion"] == scratchpad_completion(a, b)
        tokens = len(tokenizer(row["completion"], add_special_tokens=False)["input_ids"]) + 1  # <eos>
        assert tokens <= SCRATCHPAD.completion_tokens
        lengths[row["class"]].add(tokens)
    # every class's completions are longer than every easier class's: tokens grow with difficulty
    assert all(max(lengths[easier]) < min(lengths[harder]) for easier, harder in zip(classes, classes[1:]))
    # the verifier grades the final answer only: a scratchpad with a wrong column but the right sum scores 1
    assert scratchpad_completion(47, 85) == "12 13 #### 132"
    assert math_reward(["12 13 #### 132", "99 13 #### 132", "12 13 #### 131", "12 13 132"], answer=["132"] * 4) == [
        1.0, 1.0, 0.0, 0.0
    ]  # fmt: skip


def test_the_scratchpad_warm_start_stops_at_a_target_on_unseen_problems_of_the_hardest_class():
    # The target is greedy accuracy on problems of the hardest class that no split holds (never trained on, never
    # held out), generated at the task's completion length: a scratchpad's answer comes after its columns.
    from ablation_tasks import SCRATCHPAD, task_settings, task_splits

    from trl_dapo_ext.cli.demo import DemoSettings

    settings = DemoSettings(**task_settings("scratchpad"))
    assert settings.completion_tokens == SCRATCHPAD.completion_tokens > DemoSettings.completion_tokens
    assert 0 < settings.warm_start_target < 0.5 and settings.sft_steps == SCRATCHPAD.sft_steps
    splits = task_splits("scratchpad", settings)
    hardest = list(SCRATCHPAD.classes)[-1]
    assert len(splits.check_rows) == settings.sft_check_problems == SCRATCHPAD.check_problems
    assert {r["class"] for r in splits.check_rows} == {hardest}
    others = {r["prompt"] for rows in (splits.held_out, splits.sft_rows, splits.rl_rows) for r in rows}
    assert len({r["prompt"] for r in splits.check_rows} | others) == len(splits.check_rows) + len(others)
    assert task_splits("scratchpad", settings) == splits  # seeded
    assert task_settings("demo") == {} and task_splits("mixed", settings).check_rows == []


def test_merging_runs_made_apart(tmp_path):
    plan = {"budget": 10}
    for name, runs in (("a", [{"arm": 1, "seed": 0}]), ("b", [{"arm": 1, "seed": 1}]), ("c", [{"arm": 1, "seed": 0}])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"plan": plan, "runs": runs}))
    merged = ablation.merge(tmp_path / "all", [tmp_path / "b", tmp_path / "a"])
    assert [(r["arm"], r["seed"]) for r in merged["runs"]] == [(1, 0), (1, 1)]
    with pytest.raises(SystemExit, match="repeats"):
        ablation.merge(tmp_path / "all", [tmp_path / "a", tmp_path / "c"])


def test_every_arm_is_a_valid_config_of_the_demo_recipe(tmp_path):
    from trl_dapo_ext.cli.demo import DemoSettings, rl_config

    settings = DemoSettings(output_dir=str(tmp_path))
    for arm in ablation.ARMS.values():
        args = rl_config(settings, f"arm{arm.number}", arm.config, save_strategy="no")
        assert args.loss_type == arm.config["loss_type"]
        # TRL's GRPOTrainer reads epsilon_high=None as epsilon: a symmetric clip.
        assert args.epsilon == 0.2 and args.epsilon_high == arm.config["epsilon_high"]
        assert args.dynamic_sampling == arm.config["dynamic_sampling"]


def test_default_budget_is_what_arm_1_generates_in_the_demo():
    from trl_dapo_ext.cli.demo import DemoSettings

    assert ablation.default_budget(DemoSettings()) == 500 * 16 * 8 == 64_000


def test_learning_rate_flag_sets_the_rl_lr_and_a_warm_start_serves_every_lr(tmp_path, capsys):
    # The protocol's lr pilot: one output folder per lr, each reusing the seed's warm start (the lr is an RL setting).
    plan = ablation.make_plan(ablation.parse(["--output", "x", "--task", "scratchpad", "--learning-rate", "3e-5"]))
    assert plan.demo["learning_rate"] == 3e-5
    default = ablation.make_plan(ablation.parse(["--output", "x", "--task", "scratchpad"]))
    assert default.demo["learning_rate"] == 3e-4 and {**default.demo, "learning_rate": 3e-5} == plan.demo
    warm = ablation.warm_dir(tmp_path, 100)
    warm.mkdir(parents=True)
    (warm / "warm.json").write_text(json.dumps({"demo": default.demo}))
    assert ablation._saved_warm_start(tmp_path, 100, plan)
    other = ablation.make_plan(ablation.parse(["--output", "x", "--task", "mixed", "--learning-rate", "3e-5"]))
    with pytest.raises(SystemExit, match="other demo settings"):  # a warm start of other warm-start settings
        ablation._saved_warm_start(tmp_path, 100, other)
    with pytest.raises(SystemExit):
        ablation.parse(["--output", "x", "--learning-rate", "0"])
    assert "--learning-rate must be > 0" in capsys.readouterr().err


def test_num_generations_flag_keeps_completions_per_step_and_a_warm_start_serves_every_group_size(tmp_path, capsys):
    # The protocol's exploratory G = 16 pair: 8 prompts x 16 completions, the same 128 per step and the same budget,
    # from the seed's own warm start (the group shape is an RL setting).
    default = ablation.make_plan(ablation.parse(["--output", "x", "--task", "scratchpad"]))
    plan = ablation.make_plan(ablation.parse(["--output", "x", "--task", "scratchpad", "--num-generations", "16"]))
    assert (plan.demo["prompts_per_step"], plan.demo["num_generations"]) == (8, 16)
    assert plan.completions_per_step == default.completions_per_step == 128 and plan.budget == default.budget
    assert {**default.demo, "prompts_per_step": 8, "num_generations": 16} == plan.demo
    warm = ablation.warm_dir(tmp_path, 0)
    warm.mkdir(parents=True)
    (warm / "warm.json").write_text(json.dumps({"demo": default.demo}))
    assert ablation._saved_warm_start(tmp_path, 0, plan)
    for wrong in ("1", "12", "0"):
        with pytest.raises(SystemExit):
            ablation.parse(["--output", "x", "--num-generations", wrong])
        assert "--num-generations must be >= 2 and divide the 128" in capsys.readouterr().err


def test_t_interval_and_interpolation():
    mean, low, high = ablation.t_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    half = 2.776445 * 0.158113883 / 5**0.5  # t(0.975, 4) x sd / sqrt(n)
    assert mean == pytest.approx(0.3) and low == pytest.approx(0.3 - half) and high == pytest.approx(0.3 + half)
    assert ablation.t_interval([0.2]) is None
    curve = [{"steps": 0, "accuracy": {"sampled": 0.1}}, {"steps": 10, "accuracy": {"sampled": 0.3}}]
    assert ablation.sampled_at(curve, "steps", 5) == pytest.approx(0.2)
    assert ablation.sampled_at(curve, "steps", 20) == 0.3  # beyond the last evaluation: the last value


def test_results_of_other_settings_are_never_mixed(tmp_path):
    plan = ablation.Plan(demo={"model_size": "small"}, budget=100, eval_every=10)
    (tmp_path / ablation.RESULTS).write_text(json.dumps({"plan": {**vars(plan), "budget": 200}, "runs": []}))
    with pytest.raises(SystemExit, match="budget"):
        ablation.load_results(tmp_path, plan)


def test_files_made_before_a_demo_setting_existed_read_it_as_its_default(tmp_path):
    # docs/ablation_results' studies predate DemoSettings.completion_tokens: they generated the default 6 tokens.
    from dataclasses import asdict

    plan = ablation.make_plan(ablation.parse(["--output", "x", "--task", "mixed"]))
    older = {k: v for k, v in plan.demo.items() if k != "completion_tokens"}
    (tmp_path / ablation.RESULTS).write_text(json.dumps({"plan": {**asdict(plan), "demo": older}, "runs": []}))
    assert ablation.load_results(tmp_path, plan)["runs"] == []
    ablation.warm_dir(tmp_path, 0).mkdir(parents=True)
    (ablation.warm_dir(tmp_path, 0) / "warm.json").write_text(json.dumps({"demo": older}))
    assert ablation._saved_warm_start(tmp_path, 0, plan)
    longer = ablation.Plan(**{**asdict(plan), "demo": {**plan.demo, "completion_tokens": 24}})
    with pytest.raises(SystemExit, match="completion_tokens"):  # not the default: other settings
        ablation.load_results(tmp_path, longer)


RECORD_KEYS = {
    "arm", "arm_name", "seed", "budget", "completions", "completions_before_last_step", "completions_logged",
    "optimizer_steps", "wall_s", "cpu_s", "eval_s", "threads", "jobs", "machine", "accuracy_before",
    "accuracy_after", "curve", "config", "truncated_frac", "zero_variance_curve", "task",
}  # fmt: skip
POINT_KEYS = {"completions", "steps", "wall_s", "cpu_s", "accuracy", "accuracy_by_class"}
SMOKE_ARGS = ["--task", "mixed", "--arms", "1", "4", "9"]  # GRPO, DAPO refill, screening at GRPO's budget


def _smoke(output: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "ablation.py")
    command = [sys.executable, script, "--smoke", *SMOKE_ARGS, "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_smoke_run_gives_equal_budgets_every_record_and_resumes(tmp_path):
    """The mixed task, three arms x one seed x 2,048 completions, then the same command again: about 2 minutes."""
    first = _smoke(tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    runs = {r["arm"]: r for r in results["runs"]}
    budget = results["plan"]["budget"]
    per_step = results["plan"]["demo"]["prompts_per_step"] * results["plan"]["demo"]["num_generations"]
    assert sorted(runs) == [1, 4, 9] and {r["seed"] for r in runs.values()} == {0}
    for record in runs.values():
        assert RECORD_KEYS <= set(record), RECORD_KEYS - set(record)
        assert record["budget"] == budget and record["threads"] == 1
        # Every run stops at the first optimizer step that reaches the budget.
        assert record["completions_before_last_step"] < budget <= record["completions"]
        curve = record["curve"]
        assert all(POINT_KEYS <= set(point) for point in curve) and len(curve) >= 3
        assert curve[0]["completions"] == 0 and curve[0]["accuracy"] == record["accuracy_before"]
        assert curve[-1]["accuracy"] == record["accuracy_after"]
        assert curve[-1]["completions"] == record["completions"]
        assert curve[-1]["steps"] == record["optimizer_steps"]
        for axis in ("completions", "steps", "wall_s"):
            assert [p[axis] for p in curve] == sorted(p[axis] for p in curve)
        for point in curve:
            assert 0.0 <= point["accuracy"]["sampled"] <= 1.0
            by_class = point["accuracy_by_class"]  # the overall accuracy is the mean of the three classes
            assert set(by_class) == {"easy", "medium", "hard"}
            assert point["accuracy"]["sampled"] == pytest.approx(sum(c["sampled"] for c in by_class.values()) / 3)
        assert record["task"] == "mixed" and record["zero_variance_curve"]
    # Without dynamic sampling every step generates one batch; with it, the trainer's own count agrees and the
    # budget buys fewer optimizer steps.
    assert runs[1]["completions"] == budget and runs[1]["optimizer_steps"] == budget // per_step
    assert runs[4]["completions_logged"] == runs[4]["completions"]
    assert runs[4]["optimizer_steps"] < runs[1]["optimizer_steps"]
    # At GRPO's budget a step generates at most a plain step's completions: never fewer steps than GRPO.
    assert runs[9]["completions_logged"] == runs[9]["completions"]
    assert runs[9]["optimizer_steps"] >= runs[1]["optimizer_steps"]
    assert all(0.0 <= share <= 1.0 for _, share in runs[1]["zero_variance_curve"])
    assert runs[1]["accuracy_before"] == runs[4]["accuracy_before"]  # one warm start per seed
    assert (tmp_path / "warm" / "seed0" / "model.safetensors").is_file()
    table = (tmp_path / "results.md").read_text()
    assert "After the budget" in table and "At equal wall time" in table
    assert "At equal optimizer steps" not in table  # the lr schedule runs on completions: not a fair comparison
    assert "per class" in table and "Zero-variance share of GRPO's groups" in table
    assert (tmp_path / "ablation.png").stat().st_size > 20_000
    assert "3 runs to do, 0 already" in first.stdout

    again = _smoke(tmp_path)  # resumable: the finished runs are skipped, nothing is rerun
    assert "0 runs to do, 3 already" in again.stdout
    assert json.loads((tmp_path / "results.json").read_text())["runs"] == results["runs"]


GENERATION_KEYS = {"generated_tokens", "generation_calls", "decode_steps", "cpu_s"}


@pytest.mark.slow
def test_smoke_run_of_the_scratchpad_task_records_tokens_calls_and_cpu_time(tmp_path):
    """The protocol's primary pair (arms 3 and 10) on the scratchpad task, one seed, 2,048 completions, held-out
    split cut to 50 problems per class: about a minute. Every record and curve point holds tokens, generation calls,
    modelled decode steps and CPU seconds."""
    from ablation_tasks import SCRATCHPAD

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    args = ["--smoke", "--task", "scratchpad", "--arms", "3", "10", "--output", str(tmp_path)]
    command = [sys.executable, str(ROOT / "benchmarks" / "ablation.py"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    runs = {r["arm"]: r for r in results["runs"]}
    budget, limit = results["plan"]["budget"], SCRATCHPAD.completion_tokens
    assert sorted(runs) == [3, 10] and results["plan"]["held_out_per_class"] == 50
    for record in runs.values():
        assert RECORD_KEYS | GENERATION_KEYS <= set(record), (RECORD_KEYS | GENERATION_KEYS) - set(record)
        assert (
            record["task"] == "scratchpad" and record["completions_before_last_step"] < budget <= record["completions"]
        )
        # every completion is metered once; the meter's calls are the trainer's logged generation rounds
        assert record["generation_calls"] == record["generation_calls_logged"] >= 1
        assert record["completions"] < record["generated_tokens"] <= record["completions"] * limit
        assert record["generation_calls"] <= record["decode_steps"] <= record["generation_calls"] * limit
        curve = record["curve"]
        assert curve[0]["generated_tokens"] == curve[0]["generation_calls"] == curve[0]["decode_steps"] == 0
        assert curve[-1]["generated_tokens"] == record["generated_tokens"]
        assert curve[-1]["generation_calls"] == record["generation_calls"]
        for axis in GENERATION_KEYS:
            assert [p[axis] for p in curve] == sorted(p[axis] for p in curve)
        # the per-step counters, one row per optimizer step, end at the record's totals (benchmarks/pipeline_cost.py)
        per_step = record["per_step"]
        assert per_step["columns"][:3] == ["completions", "generation_calls", "decode_steps"]
        assert len(per_step["values"]) == record["optimizer_steps"]
        assert per_step["values"][-1][:3] == [
            record["completions"],
            record["generation_calls"],
            record["decode_steps"],
        ]
        assert per_step["values"][-1][3] == pytest.approx(record["cpu_s"], abs=0.05)
        for point in curve:
            by_class = point["accuracy_by_class"]
            assert list(by_class) == list(SCRATCHPAD.classes)
            assert point["accuracy"]["sampled"] == pytest.approx(sum(c["sampled"] for c in by_class.values()) / 4)
    assert runs[3]["generation_calls"] == runs[3]["optimizer_steps"]  # no dynamic sampling: one call per step
    # pipelined: one call per step in steady state, more where a step screens within itself (the first, the last,
    # and here, from a smoke warm start that solves almost nothing, many); tests/test_pipeline.py counts them
    assert runs[10]["generation_calls"] >= runs[10]["optimizer_steps"]
    assert runs[3]["accuracy_before"] == runs[10]["accuracy_before"]  # one warm start per seed
    table = (tmp_path / "results.md").read_text()
    assert "5-digit: after" in table and "200 held-out problems" in table

    # --check-task: the task at the same warm start (reused, not retrained), GRPO's groups on 10 prompts per class
    check = subprocess.run(
        [*command[:2], "--smoke", "--task", "scratchpad", "--check-task", "10", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    seed = json.loads((tmp_path / "task_check.json").read_text())["seeds"]["0"]
    assert seed["held_out"] == runs[3]["accuracy_before"] and seed["grpo_groups"]["overall"]["groups"] == 40
    by_class = seed["grpo_groups"]["by_class"]
    assert list(by_class) == list(SCRATCHPAD.classes) and all(c["groups"] == 10 for c in by_class.values())
    for shares in [*by_class.values(), seed["grpo_groups"]["overall"]]:
        assert 0.0 <= shares["pass_rate"] <= 1.0 and 1.0 <= shares["tokens"] <= limit
        assert shares["zero_variance"] == pytest.approx(shares["all_right"] + shares["all_wrong"])
    # each prompt's successes (the profile's input, protocol amendment 3), easiest class first, agree with the shares
    successes, group = seed["grpo_groups"]["successes"], seed["grpo_groups"]["group_size"]
    assert len(successes) == 40 and all(0 <= c <= group for c in successes)
    for index, shares in enumerate(by_class.values()):
        mine = successes[10 * index : 10 * (index + 1)]
        assert sum(mine) / (10 * group) == pytest.approx(shares["pass_rate"])
        assert sum(c in (0, group) for c in mine) / 10 == pytest.approx(shares["zero_variance"])
    assert "| 5-digit |" in check.stdout


def test_student_t_tails_and_quantiles():
    """Against scipy.stats.t (not installed here; its values for these points)."""
    assert ablation.t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-9)  # Cauchy: P(|T| > 1) = 1/2
    assert ablation.t_two_sided_p(2.5, 10) == pytest.approx(0.031446844, abs=1e-8)
    assert ablation.t_two_sided_p(0.0, 4) == pytest.approx(1.0)
    assert ablation.t_quantile(0.975, 4) == pytest.approx(2.776445105, abs=1e-7)
    assert ablation.t_quantile(0.975, 30) == pytest.approx(2.042272456, abs=1e-7)
    assert ablation.t_quantile(1 - 0.05 / 12, 4) == pytest.approx(4.851008443, abs=1e-6)  # Bonferroni, 6 arms
    with pytest.raises(ValueError, match="probability"):
        ablation.t_quantile(1.0, 4)


def test_holm_adjusts_in_order_and_never_below_an_earlier_step():
    # Holm: sorted p x (m - rank), made monotone, capped at 1
    assert ablation.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert ablation.holm({"a": 0.5, "b": 0.9}) == pytest.approx({"a": 1.0, "b": 1.0})
    assert ablation.holm({"only": 0.02}) == {"only": 0.02}


def test_corrected_comparisons_of_the_selection_arms():
    """Five seeds of three selection arms against GRPO: each arm's paired t-test, Holm over the three, and the
    Bonferroni interval (each at 0.05 / 3)."""
    base = [0.20, 0.30, 0.25, 0.22, 0.28]
    gains = {3: [0.0, 0.01, -0.01, 0.02, 0.0], 4: [0.05, 0.02, 0.04, 0.03, 0.06], 10: [0.1] * 5}
    runs = [{"arm": 1, "seed": s, "accuracy_after": {"sampled": v}} for s, v in enumerate(base)]
    runs += [
        {"arm": arm, "seed": s, "accuracy_after": {"sampled": v + d}}
        for arm, ds in gains.items()
        for s, (v, d) in enumerate(zip(base, ds))
    ]
    runs += [{"arm": 9, "seed": s, "accuracy_after": {"sampled": v + 0.01 * s}} for s, v in enumerate(base)]
    rows = ablation.corrected_comparisons(runs)
    assert [row["arm"] for row in rows] == [3, 4, 9]  # the peer (10) is no selection arm
    p = {row["arm"]: row["p"] for row in rows}
    assert p[4] < p[9] < p[3]
    assert rows[1]["holm_p"] == pytest.approx(3 * p[4]) and rows[2]["holm_p"] == pytest.approx(max(3 * p[4], 2 * p[9]))
    mean, low, high = rows[1]["bonferroni"]
    half = ablation.t_quantile(1 - 0.05 / 6, 4) * statistics.stdev(gains[4]) / 5**0.5
    assert (mean, low, high) == pytest.approx((0.04, 0.04 - half, 0.04 + half))


def test_a_remade_warm_start_must_be_the_one_a_seeds_runs_started_from():
    """A study resumed on a fresh machine remakes its warm starts: one whose held-out evaluation differs from the
    seed's recorded runs' is refused (pairing by seed needs one policy per seed); a seed without runs takes any."""
    before = {"greedy": 0.62, "sampled": 0.509, "pass_at_k": 0.8, "k": 8}
    results = {
        "runs": [{"seed": 4, "arm": 3, "accuracy_before": before}, {"seed": 4, "arm": 10, "accuracy_before": before}]
    }
    assert ablation.warm_start_mismatch(results, 4, {"accuracy_before": dict(before)}) is None
    assert ablation.warm_start_mismatch(results, 5, {"accuracy_before": {**before, "sampled": 0.3}}) is None
    why = ablation.warm_start_mismatch(results, 4, {"accuracy_before": {**before, "sampled": 0.5091}})
    assert "seed 4" in why and "arms [3, 10]" in why and "0.5091 against 0.5090" in why
