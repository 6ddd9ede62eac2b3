"""`trl-dapo profile`: the difficulty math, agreement with the first step of a training run on the same prompts
(the demo's tiny model), the band filter, seeding a run's prompt history from the table, and bad input."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from datasets import Dataset
from helpers import first_char_digit_reward

from trl_dapo_ext.cli import profile as profile_cli
from trl_dapo_ext.dynamic_sampling.history import PromptHistory
from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.preflight.difficulty import (
    in_band,
    planner_cost,
    prompt_stats,
    read_table,
    seed_history,
    summarize,
    zero_variance_probability,
)
from trl_dapo_ext.tiny import build_tiny_trainer, cpu_args

REWARD = "helpers.first_char_digit_reward"


@pytest.mark.parametrize("samples, group", [(4, 4), (8, 4), (16, 8), (5, 2)])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_zero_variance_estimate_is_unbiased(samples, group, p):
    """E[estimate] over Binomial(K, p) successes is exactly p^G + (1-p)^G, the chance a group of G is constant."""
    expected = sum(
        math.comb(samples, c) * p**c * (1 - p) ** (samples - c) * zero_variance_probability(c, samples, group)
        for c in range(samples + 1)
    )
    assert expected == pytest.approx(p**group + (1 - p) ** group, abs=5e-4)  # the estimate is rounded to 1e-4


def test_prompt_stats_summary_and_band():
    stats = [
        prompt_stats(0, [1, 1, 1, 1], [3, 3, 3, 3], [False] * 4, group_size=4),
        prompt_stats(1, [0, 0, 0, 0], [8, 8, 8, 8], [True] * 4, group_size=4),
        prompt_stats(2, [1, 0, 0, 0], [5, 5, 5, 5], [False] * 4, group_size=4),
        prompt_stats(3, [0.5, 0.5, 0.2, 0.2], [4, 4, 4, 4], [False] * 4, group_size=2),  # graded: measured
        prompt_stats(4, [None, 1, None, 0], [1, 1, 1, 1], [False] * 4, group_size=4),  # too few scored: no contrast
    ]
    assert [s.zero_variance for s in stats] == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert not stats[3].binary and stats[3].pass_rate == 0.0
    summary = summarize(stats[:3], group_size=4)
    assert summary["zero_variance_share"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["expected_retention"] == pytest.approx(1 / 3, abs=1e-4)
    assert summary["truncated_share"] == pytest.approx(1 / 3, abs=1e-4)
    assert summary["pass_rate_histogram"]["0"] == 1 and summary["pass_rate_histogram"]["1"] == 1
    assert in_band(stats[:3], 0.01, 0.99) == [2]
    with pytest.raises(ValueError, match="band"):
        in_band(stats, 0.9, 0.1)


def test_planner_cost_is_the_planners_own_estimate():
    cost = planner_cost(0.5, prompts=64, group_size=8, batch_groups=8)
    planner = RefillPlanner(decay=1.0, generations=8)
    planner.observe(attempted=64, informative=32)
    planner.end_step()
    assert cost["planner_retention"] == pytest.approx(planner.expected_retention(), abs=1e-4)
    assert cost["completions_per_retained_group"] == pytest.approx(8 / planner.expected_retention(), abs=0.01)
    assert cost["planner_first_round_groups"] == 8 + planner.first_round(8)
    assert 8 <= cost["planner_first_round_groups"] <= 8 * 4  # the batch at least, within the cap


def test_seed_history_outcomes_and_tallies():
    stats = [
        prompt_stats(0, [1, 1, 1, 1], [1] * 4, [False] * 4, 4),
        prompt_stats(1, [0, 0, 0, 0], [1] * 4, [False] * 4, 4),
        prompt_stats(2, [1, 0, 1, 0], [1] * 4, [False] * 4, 4),
    ]
    history = PromptHistory(window=1, floor=0.0, generations=4)
    seed_history(history, stats)
    assert history.outcomes == {0: "H", 1: "L", 2: "I"}
    assert history.tallies == {0: (4.0, 0.0), 1: (0.0, 4.0), 2: (2.0, 2.0)}
    assert history.skippable(0) and history.skippable(1) and not history.skippable(2)


# ---------------------------------------------------------------------------------------------------------------------
# End to end on the demo's tiny model
# ---------------------------------------------------------------------------------------------------------------------

PROMPTS, G, K, MAX_LEN = 256, 4, 16, 6


def _demo_model(path, sharpen: float):
    """The demo's tiny model and tokenizer, its logits sharpened so that pass rates differ from prompt to prompt."""
    from trl_dapo_ext.cli.demo import build_tokenizer_and_model

    tokenizer, model = build_tokenizer_and_model("tiny", seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)  # tied to the embeddings: the whole model's scale changes
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return tokenizer


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from trl_dapo_ext.cli.demo import make_problems

    root = tmp_path_factory.mktemp("profile")
    tokenizer = _demo_model(root / "model", sharpen=3.0)
    _demo_model(root / "other", sharpen=1.0)
    rows = [{"prompt": p["prompt"], "answer": p["answer"]} for p in make_problems(PROMPTS, seed=0)]
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return dict(root=root, tokenizer=tokenizer, rows=rows, data=data)


def _profile(demo, model: str, out: str, *extra: str) -> dict:
    argv = ["--model", str(demo["root"] / model), "--dataset", str(demo["data"]), "-G", str(G), "--samples", str(K)]
    argv += ["--use-chat-template", "false", "--reward", REWARD, "--max-completion-length", str(MAX_LEN)]
    argv += ["--output-dir", str(demo["root"] / out), "--batch-prompts", "64", "--seed", "3", *extra]
    assert profile_cli.main(argv) == 0
    return json.loads((demo["root"] / out / "summary.json").read_text())


@pytest.mark.trainer
def test_profile_agrees_with_the_first_training_step(demo, tmp_path):
    """Profile and step 1 of training sample the same model on the same 256 prompts (step 1 sees each prompt once:
    dataset size = batch), so both estimate the same three numbers. Tolerance: 5 standard deviations of the
    difference under the worst-case variance of bounded draws (Popoviciu: (b-a)^2/4 per completion, independent
    given the prompt), so it does not depend on the data and a pass by chance fails with probability < 1e-6."""
    summary = _profile(demo, "model", "profile")
    args = cpu_args(
        tmp_path,
        per_device_train_batch_size=PROMPTS * G,
        num_generations=G,
        max_completion_length=MAX_LEN,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        seed=11,
        disable_tqdm=True,
        learning_rate=1e-6,
        beta=0.0,
    )
    model, rows = str(demo["root"] / "model"), Dataset.from_list(demo["rows"])
    trainer = build_tiny_trainer(model, first_char_digit_reward, rows, demo["tokenizer"], **args)
    trainer.train()
    step = trainer.state.log_history[0]

    def tolerance(range_: float, profile_var_scale: float) -> float:
        per_draw = range_**2 / 4
        return 5 * math.sqrt(per_draw / (PROMPTS * G) + per_draw * profile_var_scale)

    mean_tol = tolerance(1.0, 1 / (PROMPTS * K))
    # frac_reward_zero_std: one indicator per prompt; the profile's estimate is a U-statistic of order G over K draws,
    # whose variance is at most (G / K) times its kernel's (Hoeffding), i.e. <= (G/K) / 4 per prompt.
    zero_tol = 5 * math.sqrt(0.25 / PROMPTS + 0.25 * (G / K) / PROMPTS)
    length_tol = tolerance(MAX_LEN - 1.0, 1 / (PROMPTS * K))
    print(
        f"profile vs step 1: reward {summary['mean_reward']:.4f} vs {step['reward']:.4f} (tol {mean_tol:.3f}); "
        f"zero-variance {summary['zero_variance_share']:.4f} vs {step['frac_reward_zero_std']:.4f} (tol {zero_tol:.3f}); "
        f"length {summary['mean_completion_length']:.3f} vs {step['completions/mean_length']:.3f} (tol {length_tol:.3f})"
    )
    assert 0.05 < summary["mean_reward"] < 0.95 and 0.02 < summary["zero_variance_share"] < 0.98  # not degenerate
    assert abs(summary["mean_reward"] - step["reward"]) < mean_tol
    assert abs(summary["zero_variance_share"] - step["frac_reward_zero_std"]) < zero_tol
    assert abs(summary["mean_completion_length"] - step["completions/mean_length"]) < length_tol
    assert abs(summary["truncated_share"] - step["completions/clipped_ratio"]) < mean_tol
    # The comparison can fail: another model's profile is far outside the tolerance.
    other = _profile(demo, "other", "profile-other")
    assert abs(other["mean_reward"] - step["reward"]) > mean_tol


@pytest.mark.trainer
def test_band_filter_and_history_seeding_in_a_run(demo, tmp_path):
    summary = _profile(demo, "model", "profile-band", "--max-prompts", "64", "--keep-band", "0.3", "0.6")
    out = demo["root"] / "profile-band"
    table = read_table(out / "prompts.jsonl")
    kept = [s.index for s in table if 0.3 <= s.pass_rate <= 0.6]
    filtered = [json.loads(line) for line in (out / "filtered.jsonl").read_text().splitlines()]
    assert 0 < summary["kept_prompts"] == len(kept) == len(filtered) < len(table)
    assert filtered == [demo["rows"][i] for i in kept]  # the input's own columns and values
    # A later run starts with the profile as its prompt history.
    args = cpu_args(
        tmp_path,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=MAX_LEN,
        dynamic_sampling=True,
        dynamic_sampling_history_from=str(out / "prompts.jsonl"),
    )
    model, rows = str(demo["root"] / "model"), Dataset.from_list(demo["rows"][:64])
    trainer = build_tiny_trainer(model, first_char_digit_reward, rows, demo["tokenizer"], **args)
    history = trainer.dynamic_sampling.history
    assert set(history.outcomes) == {s.index for s in table}
    for s in table:
        code = "I" if 0 < s.passed < s.samples else ("H" if s.passed == s.samples else "L")
        assert history.outcomes[s.index] == code
        assert history.tallies[s.index] == (s.passed, s.samples - s.passed)
    too_small = Dataset.from_list(demo["rows"][:8])
    with pytest.raises(ValueError, match="has 8 rows"):
        build_tiny_trainer(model, first_char_digit_reward, too_small, demo["tokenizer"], **args)


def test_history_from_needs_dynamic_sampling_and_an_existing_file(tmp_path):
    from trl_dapo_ext import DAPOConfig

    base = cpu_args(tmp_path, per_device_train_batch_size=8, num_generations=4)
    table = tmp_path / "prompts.jsonl"
    table.write_text("")
    with pytest.raises(ValueError, match="set dynamic_sampling=True"):
        DAPOConfig(**base, dynamic_sampling_history_from=str(table))
    with pytest.raises(ValueError, match="does not exist"):
        DAPOConfig(**base, dynamic_sampling=True, dynamic_sampling_history_from=str(tmp_path / "missing.jsonl"))


def test_recipe_supplies_the_settings_and_flags_override_them(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "model_name_or_path: some/model\ndataset_name: data.jsonl\nprompt_column: question\nnum_generations: 6\n"
        "temperature: 0.7\nreward_funcs: [math_reward, math_format_reward]\nlearning_rate: 1.0e-5\n"
    )
    options = profile_cli.parse_options(["--config", str(recipe)], "trl-dapo profile")
    assert (options.model, options.dataset, options.prompt_column) == ("some/model", "data.jsonl", "question")
    assert (options.num_generations, options.temperature) == (6, 0.7)
    assert options.reward == ["math_reward", "math_format_reward"]
    assert options.top_p == 1.0  # not in the recipe: TRL's GRPOConfig default, as training would sample
    options = profile_cli.parse_options(["--config", str(recipe), "--reward", "code_reward", "-G", "4"], "p")
    assert options.reward == ["code_reward"] and options.num_generations == 4


@pytest.mark.parametrize(
    "extra, message",
    [
        (["-G", "1"], "--num-generations must be >= 2"),
        (["--samples", "2"], "--samples 2 must be >= --num-generations 4"),
        (["--keep-band", "0.8", "0.2"], "--keep-band needs 0 <= LOW <= HIGH <= 1"),
        (["--reward", "no_such_reward"], "unknown reward function"),
        (["--prompt-column", "question"], "prompt_column 'question' is not a dataset column"),
        (["--use-chat-template", "true", "--model", "{root}/nomodel"], "nomodel does not exist"),
        (["--dataset", "/no/such/data.jsonl"], "does not exist"),
        (["--config", "/no/such/recipe.yaml"], "recipe /no/such/recipe.yaml does not exist"),
    ],
)
def test_cli_bad_input(demo, capsys, extra, message):
    argv = ["--model", str(demo["root"] / "model"), "--dataset", str(demo["data"]), "-G", "4"]
    argv += ["--use-chat-template", "false", "--reward", REWARD, "--output-dir", str(demo["root"] / "bad")]
    argv += [a.replace("{root}", str(demo["root"])) for a in extra]
    assert profile_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("trl-dapo profile: error:") and message in err


def _printed_profile(successes: list[int], samples: int = 8, group: int = 8) -> str:
    from pathlib import Path

    from trl_dapo_ext.cli.profile.output import format_summary

    rows = [[1.0] * c + [0.0] * (samples - c) for c in successes]
    stats = [prompt_stats(i, r, [5] * samples, [False] * samples, group_size=group) for i, r in enumerate(rows)]
    summary = summarize(stats, group_size=group)
    summary.update(mean_prompt_length=20.0, max_completion_length=16)
    return format_summary(summary, Path("out"), stats)


@pytest.mark.parametrize("successes", [[0] * 60 + [8] * 20 + [4] * 20, [0] * 40 + [1] * 30 + [2] * 30])
def test_profile_prints_each_quantity_once_with_its_unit_and_interval(successes):
    """The zero-variance share once (not also as a retention), GRPO's cost once (not also as the planner's cost per
    retained group), screening's saving with its interval, where the answer comes from (the study), no unmeasured mode."""
    text = _printed_profile(successes)
    lines = text.splitlines()
    assert sum("zero-variance" in line for line in lines) == 1 and "retention" not in text
    assert "completions per retained group" not in text
    share = next(line for line in lines if line.startswith("zero-variance groups"))
    assert re.search(r": \d+\.\d% of groups \[\d+\.\d%, \d+\.\d%\]$", share), share
    grpo = [line for line in lines if line.strip().startswith("GRPO")]
    assert len(grpo) == 1 and re.search(r": \d+\.\d completions \[\d+\.\d, \d+\.\d\]$", grpo[0]), grpo
    saving = next(line for line in lines if "screening's saving" in line)
    assert re.search(r"\d+% of GRPO's completions per informative group \[-?\d+%, -?\d+%\]$", saving), saving
    assert "from the study's 20 seeds" in text and "no measurable difference expected" in text
    assert "k=2" not in text and "k = 2" not in text
