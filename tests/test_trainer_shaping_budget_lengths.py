"""Three trainer defects that trained or logged the wrong thing silently.

* Overlong shaping must keep an unscorable row unscorable: where every task reward is None, the penalty is NaN too,
  so TRL's "every column is NaN" rule leaves the row out of the baseline and gives it advantage 0.
* ``dynamic_sampling_max_groups_per_step`` bounds the groups a step generates with a numeric
  ``dynamic_sampling_oversample`` as well as with the planner.
* Length metrics count a truncated completion's model tokens (as TRL's ``completions/*_length`` do), also when
  ``mask_truncated_completions`` zeroes its tool mask.
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from helpers import RoundRecorder, add_eos_bias, tiny_trainer
from test_dynamic_sampling import KindReward, kinds_dataset

from trl_dapo_ext import DynamicSamplingExhausted
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer

G = 4


def none_reward(completions, **kwargs):
    """A task reward that can score nothing (e.g. math_reward on a dataset of unparseable golds)."""
    return [None] * len(completions)


def none_right_wrong_right_reward(completions, **kwargs):
    """Per group, by position: unscorable, right, wrong, right (TRL hands the G siblings of a prompt in a row)."""
    return [(None, 1.0, 0.0, 1.0)[i % G] for i in range(len(completions))]


def logged_steps(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "loss" in h]


# ------------------------------------------------------------------------------------ overlong shaping, unscorable


@pytest.mark.parametrize("estimator", ["grpo", "loo"])  # TRL's advantages, and the ones this package recomputes
def test_all_unscorable_rewards_with_shaping_train_on_nothing(
    make_model, tokenizer, prompt_dataset, tmp_path, estimator
):
    model = add_eos_bias(make_model(seed=1), tokenizer.eos_token_id, 4.0)  # lengths vary, so the penalty would too
    trainer = tiny_trainer(
        model,
        none_reward,
        prompt_dataset,
        tokenizer,
        tmp_path,
        max_completion_length=8,
        overlong_buffer_length=6,
        advantage_estimator=estimator,
        max_steps=2,
    )
    recorder = RoundRecorder(trainer)
    trainer.train()

    lengths = torch.cat([batch["completion_mask"].sum(dim=1) for batch in recorder.batches])
    # Penalised lengths (over 8 - 6 = 2 tokens) that differ: scored, they would give non-zero advantages.
    assert len(set(lengths.tolist())) > 1 and lengths.max() > 2, "the penalty never varied: the test proves nothing"
    for batch, rewards_per_func in zip(recorder.batches, recorder.rewards):
        assert torch.isnan(rewards_per_func).all(), rewards_per_func  # the penalty of an unscorable row is NaN
        assert torch.all(batch["advantages"] == 0), batch["advantages"]
    for log in logged_steps(trainer):
        assert log["loss"] == 0.0 and log["grad_norm"] == 0.0, log


def hand_advantages(task: list[float | None], penalty: list[float]) -> list[float]:
    """GRPO advantages of one group, written out: the scorable members' mean and sample std, 0 for the others."""
    shaped = [t + p for t, p in zip(task, penalty) if t is not None]
    mean = sum(shaped) / len(shaped)
    std = math.sqrt(sum((r - mean) ** 2 for r in shaped) / (len(shaped) - 1))
    return [0.0 if t is None else (t + p - mean) / (std + 1e-4) for t, p in zip(task, penalty)]


@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_an_unscorable_row_in_a_mixed_group_is_left_out_not_wrong(
    make_model, tokenizer, prompt_dataset, tmp_path, dynamic_sampling
):
    # Per group: None, 1, 0, 1 (+ the length penalty). Scored as wrong, the None row would pull the baseline down and
    # get a negative advantage; unscorable, it is left out: the baseline is the mean of the other three.
    extra = {"dynamic_sampling": True, "dynamic_sampling_oversample": 1.0} if dynamic_sampling else {}
    model = add_eos_bias(make_model(seed=1), tokenizer.eos_token_id, 4.0)
    trainer = tiny_trainer(
        model,
        none_right_wrong_right_reward,
        prompt_dataset,
        tokenizer,
        tmp_path,
        max_completion_length=8,
        overlong_buffer_length=6,
        max_steps=1,
        **extra,
    )
    recorder = RoundRecorder(trainer)  # every group is informative: one round, its rows in order
    trainer.train()

    (batch,), (rewards_per_func,) = recorder.batches, recorder.rewards
    assert torch.isnan(rewards_per_func[0::G]).all()  # task reward and penalty of every unscorable row
    task = [(None, 1.0, 0.0, 1.0)[i % G] for i in range(len(rewards_per_func))]
    penalty = rewards_per_func[:, 1].tolist()
    expected = [a for g in range(0, len(task), G) for a in hand_advantages(task[g : g + G], penalty[g : g + G])]
    torch.testing.assert_close(batch["advantages"], torch.tensor(expected))


def test_unscorable_rows_with_shaping_are_diagnosed_by_the_task_reward_alone(
    make_model, tokenizer, prompt_dataset, tmp_path
):
    trainer = tiny_trainer(
        make_model(seed=2),
        none_reward,
        prompt_dataset,
        tokenizer,
        tmp_path,
        dynamic_sampling=True,
        dynamic_sampling_max_rounds=2,
        overlong_buffer_length=4,
        max_steps=1,
    )
    with pytest.raises(DynamicSamplingExhausted) as error:
        trainer.train()
    message = str(error.value)
    assert "0 scorable completions" in message and "(none_reward: " in message, message
    assert "overlong_penalty" not in message, message  # NaN only because the task reward is: not the user's to fix


# --------------------------------------------------------------------------------------------- the per-step budget


@pytest.mark.parametrize("oversample", [None, 3.0])  # the planner, and the fixed first-round factor
def test_the_step_budget_bounds_the_groups_generated(make_model, tokenizer, tmp_path, oversample):
    # Every prompt all right: no group is ever informative, so only the budget (3 groups per process, the batch's
    # own 2 included) stops the rounds. Without it the fixed factor generates 6 groups, then refills twice more.
    reward = KindReward()
    trainer = tiny_trainer(
        make_model(seed=2),
        reward,
        kinds_dataset(["right"], repeat=12),
        tokenizer,
        tmp_path,
        dynamic_sampling=True,
        dynamic_sampling_oversample=oversample,
        dynamic_sampling_max_groups_per_step=3,
        dynamic_sampling_max_rounds=3,
        dynamic_sampling_on_exhausted="fill",
        max_steps=2,
    )
    trainer.train()
    generated = [len(kinds) // G for kinds in reward.calls]  # groups per generation round
    logs = [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS in h]
    assert len(logs) == 2
    assert all(log[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] <= 3 for log in logs), logs
    assert sum(generated) == sum(log[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] for log in logs), generated
    if oversample is not None:  # the fixed factor asks for 3 * 2 = 6 groups; the budget leaves 3, in one round
        assert generated == [3, 3], generated


def test_a_spent_step_budget_with_a_fixed_factor_raises_naming_the_budget(make_model, tokenizer, tmp_path):
    trainer = tiny_trainer(
        make_model(seed=2),
        KindReward(),
        kinds_dataset(["right"], repeat=12),
        tokenizer,
        tmp_path,
        dynamic_sampling=True,
        dynamic_sampling_oversample=3.0,
        dynamic_sampling_max_groups_per_step=2,
        dynamic_sampling_max_rounds=3,
        max_steps=1,
    )
    with pytest.raises(DynamicSamplingExhausted) as error:
        trainer.train()
    message = str(error.value)
    assert "2 prompt groups attempted" in message, message  # the batch's own 2 groups, nothing more
    assert "dynamic_sampling_max_groups_per_step=2" in message, message


# ----------------------------------------------------------------------------------- lengths with tools, truncated

MAX_LENGTH = 10
# Per group: (completion length, whether it ends with EOS, its tool-output positions). TRL's length counts the model's
# tokens (tool_mask == 1): 5, 5, 8, 10; the last two hit the cap without EOS (truncated).
SCRIPT = ((5, True, ()), (8, True, (2, 3, 4)), (10, False, (3, 4)), (10, False, ()))
MODEL_TOKENS = [5, 5, 8, 10]


def tool_rollout(prompts, trainer):
    """TRL ``rollout_func`` with an ``env_mask`` (TRL's tool mask): completions follow :data:`SCRIPT`."""
    tokenizer = trainer.processing_class
    letter, eos = tokenizer.convert_tokens_to_ids("a"), tokenizer.eos_token_id
    completion_ids, env_mask = [], []
    for i in range(len(prompts)):
        length, ends, tool_positions = SCRIPT[i % G]
        completion_ids.append([letter] * (length - 1) + [eos if ends else letter])
        env_mask.append([0 if position in tool_positions else 1 for position in range(length)])
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask}


def position_reward(completions, **kwargs):
    """0, 1, 0, 1 within every group: each group is informative."""
    return [float(i % 2) for i in range(len(completions))]


@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_length_metrics_count_a_truncated_rows_model_tokens(
    make_model, tokenizer, tmp_path, monkeypatch, dynamic_sampling
):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func warns that it is experimental
    extra = {"dynamic_sampling": True, "dynamic_sampling_oversample": 1.0} if dynamic_sampling else {}
    trainer = tiny_trainer(
        make_model(seed=3),
        position_reward,
        Dataset.from_dict({"prompt": ["v0:", "v1:", "v2:", "v3:"]}),
        tokenizer,
        tmp_path,
        rollout_func=tool_rollout,
        per_device_train_batch_size=G,
        max_completion_length=MAX_LENGTH,
        mask_truncated_completions=True,
        overlong_buffer_length=4,  # the soft-penalty zone: 6 < L <= 10
        diagnostics=True,
        learning_rate=0.0,
        max_steps=1,
        **extra,
    )
    trainer.train()
    (log,) = logged_steps(trainer)
    # TRL's own values for this batch (plain TRL logs them; dynamic sampling recomputes them on the update batch).
    assert log["completions/mean_length"] == pytest.approx(sum(MODEL_TOKENS) / G)
    assert log["completions/min_length"] == 5 and log["completions/max_length"] == 10
    assert log["completions/clipped_ratio"] == 0.5
    assert log["completions/mean_terminated_length"] == 5
    assert log[N.LENGTH_TRUNCATED_FRAC] == 0.5
    assert log[N.LENGTH_IN_BUFFER_FRAC] == 0.5  # the two truncated rows (8 and 10 model tokens)
