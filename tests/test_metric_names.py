"""The metric declaration (trl_dapo_ext/metric_names.py) is what training logs, and docs/metrics.md is generated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import digit_fraction_reward, tiny_trainer
from test_dynamic_sampling import KindReward, kinds_dataset

from trl_dapo_ext.metric_names import ALL_METRICS, OUR_PREFIXES, expected_names, render_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def test_metrics_page_is_generated_from_the_declaration():
    assert PAGE.read_text() == render_markdown(), (
        "docs/metrics.md is stale: run `python -m trl_dapo_ext.metric_names > docs/metrics.md`"
    )


def test_every_name_is_declared_once_under_one_of_our_prefixes():
    names = [m.name for m in ALL_METRICS]
    assert len(names) == len(set(names))
    assert all(name.startswith(OUR_PREFIXES) for name in names)


def _logged_names(make_model, tokenizer, tmp_path, dataset, reward, **overrides) -> list[set[str]]:
    trainer = tiny_trainer(make_model(seed=2), reward, dataset, tokenizer, tmp_path, max_steps=2, **overrides)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    return [{key for key in log if key.startswith(OUR_PREFIXES)} for log in logs]


@pytest.mark.trainer
def test_a_run_with_every_feature_logs_exactly_the_declared_names(make_model, tokenizer, tmp_path):
    steps = _logged_names(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["right", "wrong", "varying"], repeat=8),
        KindReward(),
        diagnostics=True,
        dynamic_sampling=True,
        dynamic_sampling_skip_window=1,
        overlong_buffer_length=4,
    )
    expected = expected_names(
        diagnostics=True, dynamic_sampling=True, overlong=True, skip=True, cuda=torch.cuda.is_available()
    )
    for names in steps:
        assert names == expected, f"undeclared: {sorted(names - expected)}, not logged: {sorted(expected - names)}"


@pytest.mark.trainer
def test_a_diagnostics_run_without_optional_features_logs_exactly_the_declared_names(
    make_model, tokenizer, prompt_dataset, tmp_path
):
    steps = _logged_names(make_model, tokenizer, tmp_path, prompt_dataset, digit_fraction_reward, diagnostics=True)
    expected = expected_names(diagnostics=True, cuda=torch.cuda.is_available())
    for names in steps:
        assert names == expected, f"undeclared: {sorted(names - expected)}, not logged: {sorted(expected - names)}"


@pytest.mark.trainer
def test_fixed_oversampling_logs_no_planner_estimate(make_model, tokenizer, tmp_path):
    steps = _logged_names(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["right", "varying"], repeat=8),
        KindReward(),
        dynamic_sampling=True,
        dynamic_sampling_oversample=2.0,
    )
    expected = expected_names(dynamic_sampling=True, planner=False)
    for names in steps:
        assert names == expected, f"undeclared: {sorted(names - expected)}, not logged: {sorted(expected - names)}"
