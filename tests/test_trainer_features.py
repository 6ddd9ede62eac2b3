"""The extension fields in a real (tiny) training run: overlong shaping and the advantage estimators."""

from __future__ import annotations

from math import sqrt
from statistics import mean, stdev

import pytest
import torch
from helpers import RoundRecorder, add_eos_bias, constant_reward, tiny_trainer

pytestmark = pytest.mark.trainer

G = 4
EPS = 1e-4  # the stabiliser TRL adds to every standard deviation it divides by


def make_trainer(make_model, tokenizer, dataset, tmp_path, reward_funcs, eos_bias=None, **overrides):
    model = make_model(seed=1)
    if eos_bias is not None:
        add_eos_bias(model, tokenizer.eos_token_id, eos_bias)
    trainer = tiny_trainer(model, reward_funcs, dataset, tokenizer, tmp_path, **overrides)
    return trainer, RoundRecorder(trainer)


def hand_penalty(length: int, max_length: int = 8, buffer_length: int = 6) -> float:
    """DAPO Eq. 13 for a completion that cannot exceed max_length: 0 up to max - buffer, then -1/buffer per token."""
    free = max_length - buffer_length
    return 0.0 if length <= free else (free - length) / buffer_length


def hand_grpo(rewards: list[float]) -> list[float]:
    """(r - group mean) / (group sample std + eps), 0 for a group without contrast (DeepSeekMath Sec. 4.1.2)."""
    groups = [rewards[start : start + G] for start in range(0, len(rewards), G)]
    return [0.0 if max(g) == min(g) else (r - mean(g)) / (stdev(g) + EPS) for g in groups for r in g]


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
        lengths = batch["completion_mask"].sum(dim=1).tolist()  # EOS included, as TRL counts len(completion_ids)
        penalties = [hand_penalty(length) for length in lengths]
        torch.testing.assert_close(rewards_per_func[:, 1], torch.tensor(penalties))
        expected = hand_grpo([1.0 + penalty for penalty in penalties])
        torch.testing.assert_close(batch["advantages"], torch.tensor(expected), rtol=1e-5, atol=1e-5)
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


class ScriptedReward:
    """Returns the next line of a script on each call (one call per generation batch of two groups)."""

    __name__ = "scripted_reward"

    def __init__(self, script: list[list[float]]):
        self.script = list(script)

    def __call__(self, completions, **kwargs):
        values = self.script.pop(0)
        assert len(values) == len(completions)
        return values


# Two generation batches of two groups each. Per group: its mean, its deviations r - mean, their sum of squares.
SCRIPT = [
    [0.0, 1.0, 2.0, 5.0] + [1.0, 1.0, 3.0, 3.0],  # A: mean 2, (-2, -1, 0, 3), 14; B: mean 2, (-1, -1, 1, 1), 4
    [0.5, 0.5, 0.5, 0.5] + [2.0, 0.0, 1.0, 1.0],  # C: no contrast;              D: mean 1, (1, -1, 0, 0), 2
]
# Leave-one-out: r - mean of the 3 others = 4/3 (r - mean).
LOO_A, LOO_B, LOO_D = [-8 / 3, -4 / 3, 0.0, 4.0], [-4 / 3, -4 / 3, 4 / 3, 4 / 3], [4 / 3, -4 / 3, 0.0, 0.0]
DEV_A, DEV_B, DEV_D = [-2.0, -1.0, 0.0, 3.0], [-1.0, -1.0, 1.0, 1.0], [1.0, -1.0, 0.0, 0.0]
ZERO = [0.0] * 4


def over(values: list[float], std: float) -> list[float]:
    return [value / (std + EPS) for value in values]


EXPECTED = {
    ("loo", "none", "sample"): [LOO_A + LOO_B, ZERO + LOO_D],
    # sample std: sqrt(squares / 3)
    ("loo", "group", "sample"): [
        over(LOO_A, sqrt(14 / 3)) + over(LOO_B, sqrt(4 / 3)),
        ZERO + over(LOO_D, sqrt(2 / 3)),
    ],
    # population std: sqrt(squares / 4)
    ("grpo", "group", "population"): [over(DEV_A, sqrt(14 / 4)) + over(DEV_B, 1.0), ZERO + over(DEV_D, sqrt(2 / 4))],
    # batch 1: mean 2, squares 14 + 4 = 18 over 8 rows; batch 2: mean 0.75, squares 4 * 0.25**2 + 1.25**2 +
    # 0.75**2 + 2 * 0.25**2 = 2.5 over 8 rows
    ("loo", "batch", "population"): [over(LOO_A + LOO_B, sqrt(18 / 8)), ZERO + over(LOO_D, sqrt(2.5 / 8))],
}


@pytest.mark.parametrize("estimator,scale,std", list(EXPECTED))
def test_estimator_replaces_trl_advantages(make_model, tokenizer, prompt_dataset, tmp_path, estimator, scale, std):
    trainer, recorder = make_trainer(
        make_model,
        tokenizer,
        prompt_dataset,
        tmp_path,
        ScriptedReward(SCRIPT),
        advantage_estimator=estimator,
        scale_rewards=scale,
        reward_std=std,
        max_steps=2,
    )
    trainer.train()
    assert len(recorder.batches) == 2
    for batch, expected in zip(recorder.batches, EXPECTED[estimator, scale, std]):
        torch.testing.assert_close(batch["advantages"], torch.tensor(expected), rtol=1e-5, atol=1e-6)
    # The completions table shows the advantages that were trained on.
    logged = list(trainer._logs["advantages"])[-8:]
    assert logged == pytest.approx(recorder.batches[-1]["advantages"].tolist())
