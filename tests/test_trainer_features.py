"""The extension fields in a real (tiny) training run: overlong shaping and the advantage estimators."""

from __future__ import annotations

import pytest
import torch
from helpers import RoundRecorder, add_eos_bias, constant_reward, digit_fraction_reward, tiny_trainer

from trl_dapo_ext.core.advantages import group_advantages
from trl_dapo_ext.core.overlong import overlong_penalty

pytestmark = pytest.mark.trainer


def make_trainer(make_model, tokenizer, dataset, tmp_path, reward_funcs, eos_bias=None, **overrides):
    model = make_model(seed=1)
    if eos_bias is not None:
        add_eos_bias(model, tokenizer.eos_token_id, eos_bias)
    trainer = tiny_trainer(model, reward_funcs, dataset, tokenizer, tmp_path, **overrides)
    return trainer, RoundRecorder(trainer)


def test_overlong_penalty_reaches_the_advantages(make_model, tokenizer, prompt_dataset, tmp_path):
    # A constant task reward gives zero advantages everywhere; only the length penalty can make them non-zero.
    trainer, recorder = make_trainer(
        make_model,
        tokenizer,
        prompt_dataset,
        tmp_path,
        constant_reward,
        eos_bias=4.0,
        max_completion_length=8,
        overlong_buffer_length=6,
        max_steps=2,
    )
    assert trainer.reward_func_names == ["constant_reward", "overlong_penalty"]
    assert trainer.task_reward_indices == [0]
    trainer.train()

    for batch, rewards_per_func in zip(recorder.batches, recorder.rewards):
        lengths = batch["completion_mask"].sum(dim=1)  # EOS included, as TRL counts len(completion_ids)
        expected_penalty = overlong_penalty(lengths, max_length=8, buffer_length=6)
        torch.testing.assert_close(rewards_per_func[:, 1], expected_penalty)
        expected = group_advantages(1.0 + expected_penalty, num_generations=4)
        torch.testing.assert_close(batch["advantages"], expected)
    all_advantages = torch.cat([b["advantages"] for b in recorder.batches])
    assert all_advantages.abs().max() > 0.1, "lengths never varied: the test would prove nothing"

    logged = [h for h in trainer.state.log_history if "rewards/overlong_penalty/mean" in h]
    assert len(logged) == 2 and all(h["rewards/overlong_penalty/mean"] <= 0 for h in logged)
    assert all(h["rewards/constant_reward/mean"] == 1.0 for h in logged)  # the task reward is reported unshaped


def test_without_shaping_a_constant_reward_gives_zero_advantages(make_model, tokenizer, prompt_dataset, tmp_path):
    trainer, recorder = make_trainer(
        make_model, tokenizer, prompt_dataset, tmp_path, constant_reward, eos_bias=4.0, max_steps=1
    )
    trainer.train()
    assert torch.all(recorder.batches[0]["advantages"] == 0)


@pytest.mark.parametrize(
    "estimator,scale,std",
    [
        ("loo", "none", "sample"),
        ("loo", "group", "sample"),
        ("grpo", "group", "population"),
        ("loo", "batch", "population"),
    ],
)
def test_estimator_replaces_trl_advantages(make_model, tokenizer, prompt_dataset, tmp_path, estimator, scale, std):
    trainer, recorder = make_trainer(
        make_model,
        tokenizer,
        prompt_dataset,
        tmp_path,
        digit_fraction_reward,
        advantage_estimator=estimator,
        scale_rewards=scale,
        reward_std=std,
        max_steps=2,
    )
    trainer.train()
    for batch, rewards_per_func in zip(recorder.batches, recorder.rewards):
        expected = group_advantages(rewards_per_func[:, 0], 4, estimator=estimator, scale=scale, std=std)
        torch.testing.assert_close(batch["advantages"], expected)
    assert any(b["advantages"].abs().max() > 0 for b in recorder.batches)
    # The completions table shows the advantages that were trained on.
    logged = list(trainer._logs["advantages"])[-8:]
    assert logged == pytest.approx(recorder.batches[-1]["advantages"].tolist())


def test_loo_differs_from_grpo_by_the_group_factor(make_model, tokenizer, prompt_dataset, tmp_path):
    trainer, recorder = make_trainer(
        make_model,
        tokenizer,
        prompt_dataset,
        tmp_path,
        digit_fraction_reward,
        advantage_estimator="loo",
        scale_rewards="none",
        max_steps=1,
    )
    trainer.train()
    rewards = recorder.rewards[0][:, 0]
    centred = group_advantages(rewards, 4, scale="none")
    torch.testing.assert_close(recorder.batches[0]["advantages"], centred * 4 / 3)
