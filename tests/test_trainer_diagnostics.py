"""Diagnostics wired into training: keys present, values consistent with the run, report drawn from a real run."""

from __future__ import annotations

import pytest
from helpers import digit_fraction_reward, tiny_trainer
from test_dynamic_sampling import KindReward, kinds_dataset

from trl_dapo_ext.cli.report import build_report
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer

PREFIXES = ("groups/", "length/", "cost/", "time/")


def train(make_model, tokenizer, tmp_path, dataset, reward, **overrides):
    trainer = tiny_trainer(make_model(seed=2), reward, dataset, tokenizer, tmp_path, **overrides)
    trainer.train()
    return trainer, [h for h in trainer.state.log_history if "loss" in h]


def test_diagnostics_are_off_by_default(make_model, tokenizer, prompt_dataset, tmp_path):
    _, logs = train(make_model, tokenizer, tmp_path, prompt_dataset, digit_fraction_reward, max_steps=1)
    assert not [key for key in logs[0] if key.startswith(PREFIXES)]


def test_diagnostics_metrics_every_step(make_model, tokenizer, prompt_dataset, tmp_path):
    _, logs = train(
        make_model,
        tokenizer,
        tmp_path,
        prompt_dataset,
        digit_fraction_reward,
        max_steps=2,
        diagnostics=True,
        diagnostics_success_threshold=0.5,
        overlong_buffer_length=4,
    )
    for log in logs:
        groups = log[N.GROUPS_FRAC_ALL_MAX] + log[N.GROUPS_FRAC_ALL_MIN] + log[N.GROUPS_FRAC_MIXED]
        assert groups == pytest.approx(1.0)
        assert 0.0 <= log[N.GROUPS_PASS_AT_1] <= log[N.GROUPS_PASS_AT_K] <= 1.0
        assert log[N.LENGTH_TRUNCATED_FRAC] == pytest.approx(log["completions/clipped_ratio"])
        assert -1.0 <= log[N.LENGTH_OVERLONG_PENALTY_MEAN] <= 0.0
        assert 0.0 <= log[N.LENGTH_IN_BUFFER_FRAC] <= 1.0
        # 8 completions of at most 8 tokens in 2 groups: at most 32 generated tokens per group
        assert 0 < log[N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP] <= 32
        assert 0 < log[N.COST_USEFUL_TOKEN_FRAC] <= 1
        assert log[N.TIME_GENERATION_S] > 0 and log[N.TIME_UPDATE_S] > 0
        fractions = [value for key, value in log.items() if key.startswith("time/") and key.endswith("_frac")]
        assert sum(fractions) == pytest.approx(1.0, abs=1e-6)


def test_group_split_counts_attempted_groups_with_dynamic_sampling(make_model, tokenizer, tmp_path):
    _, logs = train(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["right", "wrong", "varying"], repeat=8),
        KindReward(),
        max_steps=2,
        dynamic_sampling=True,
        diagnostics=True,
    )
    for log in logs:
        attempted = log[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS]
        # 'right' prompts score 1.0 (all correct), 'wrong' 0.0, 'varying' strictly between: mixed
        assert log[N.GROUPS_FRAC_ALL_MAX] == pytest.approx(log[N.DYNAMIC_SAMPLING_ALL_MAX_GROUPS] / attempted)
        assert log[N.GROUPS_FRAC_ALL_MIN] == pytest.approx(log[N.DYNAMIC_SAMPLING_ALL_MIN_GROUPS] / attempted)
        generated = log[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] * 8  # at most 8 tokens each
        assert log[N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP] <= generated / log[N.DYNAMIC_SAMPLING_RETAINED_GROUPS]
        assert log[N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP] > 0


def test_report_from_a_real_dynamic_sampling_run(make_model, tokenizer, tmp_path):
    trainer, _ = train(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["right", "wrong", "varying"], repeat=8),
        KindReward(),
        max_steps=3,
        dynamic_sampling=True,
        diagnostics=True,
    )
    trainer.save_state()
    report = build_report(tmp_path)
    for title in (
        "Reward and accuracy",
        "Zero-variance split",
        "Dynamic sampling: retention and generation calls",
        "Dynamic sampling: groups per step",
    ):
        assert title in report.panels
    assert any(title.startswith("Time") for title in report.panels)
    from PIL import Image

    with Image.open(report.image) as image:
        assert image.width > 800 and image.height > 600
