"""Trainer defects found by review (issue 15): the constructor's signature, peak memory, reward errors, stale rounds."""

from __future__ import annotations

import inspect

import pytest
import torch
import trl.trainer.grpo_trainer as grpo_module
from helpers import digit_fraction_reward, grpo_kwargs, tiny_trainer
from trl import GRPOConfig, GRPOTrainer

from trl_dapo_ext import DAPOConfig, DAPOTrainer, RewardFunctionError
from trl_dapo_ext.diagnostics import DiagnosticsCallback
from trl_dapo_ext.dynamic_sampling.rounds import PROMPT_INDEX_COLUMN
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer


# ---------------------------------------------------------------------------------------------------- signature


def test_constructor_has_exactly_grpo_trainers_parameters():
    assert inspect.signature(DAPOTrainer.__init__) == inspect.signature(GRPOTrainer.__init__)


def test_train_dataset_can_be_passed_positionally_as_in_trl(make_model, tokenizer, prompt_dataset, tmp_path):
    args = DAPOConfig(**grpo_kwargs(tmp_path, dynamic_sampling=True))
    trainer = DAPOTrainer(make_model(), digit_fraction_reward, args, prompt_dataset, processing_class=tokenizer)
    # The positional dataset is the one dynamic sampling indexes (its rows carry their dataset index).
    assert trainer.train_dataset[PROMPT_INDEX_COLUMN] == list(range(len(prompt_dataset)))
    assert trainer.train_dataset["prompt"] == prompt_dataset["prompt"]


def test_unknown_argument_is_refused_like_trl(make_model, tokenizer, prompt_dataset, tmp_path):
    args = GRPOConfig(**grpo_kwargs(tmp_path))
    with pytest.raises(TypeError, match="no_such_argument"):
        DAPOTrainer(make_model(), digit_fraction_reward, args, prompt_dataset, no_such_argument=1)


# ---------------------------------------------------------------------------------------------------- peak memory


class FakeCuda:
    """A CUDA peak-memory counter that behaves like torch's: the peak since the last reset."""

    def __init__(self):
        self.allocated = 0
        self.peak = 0

    def allocate(self, gib: float) -> None:
        self.allocated = int(gib * 2**30)
        self.peak = max(self.peak, self.allocated)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: setattr(self, "peak", 0))


def test_the_runs_peak_memory_survives_the_steps(make_model, tokenizer, prompt_dataset, tmp_path, monkeypatch):
    trainer = tiny_trainer(make_model(), digit_fraction_reward, prompt_dataset, tokenizer, tmp_path, diagnostics=True)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, DiagnosticsCallback))
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    for gib in (5.0, 2.0):  # step 1 peaks at 5 GiB, step 2 at 2 GiB
        callback.on_step_begin(trainer.args, trainer.state, trainer.control)
        cuda.allocate(gib)
        callback.on_step_end(trainer.args, trainer.state, trainer.control)
    # What train_summary.json reads at the end (torch.cuda.max_memory_allocated) is still the run's peak ...
    assert torch.cuda.max_memory_allocated() == 5 * 2**30
    metrics = trainer._metrics["train"]
    # ... the logged peak is the run's peak so far, and the memory held at each step's end is logged beside it.
    assert metrics[N.COST_PEAK_MEMORY_GB] == [5.0, 5.0]
    assert metrics[N.COST_MEMORY_ALLOCATED_GB] == [5.0, 2.0]


# ---------------------------------------------------------------------------------------------------- reward errors


def build(make_model, tokenizer, dataset, tmp_path, reward=digit_fraction_reward, **overrides):
    return tiny_trainer(make_model(), reward, dataset, tokenizer, tmp_path, **overrides)


def test_a_raising_reward_function_is_named_with_the_step(make_model, tokenizer, prompt_dataset, tmp_path):
    calls = []

    def broken_reward(completions, **kwargs):
        calls.append(len(completions))
        if len(calls) == 2:
            raise KeyError("answer")
        return [0.0] * len(completions)

    trainer = build(make_model, tokenizer, prompt_dataset, tmp_path, reward=[digit_fraction_reward, broken_reward])
    with pytest.raises(RewardFunctionError) as caught:
        trainer.train()
    message = str(caught.value)
    # the second generation round is the second optimizer step, counted from 1 as the progress bar does
    assert "reward function 'broken_reward' raised at training step 2" in message
    assert "digit_fraction_reward" not in message
    assert "KeyError" in message
    assert isinstance(caught.value.__cause__, KeyError)


@pytest.mark.parametrize("style", ["parameter", "kwargs"])
def test_a_reward_that_needs_a_missing_column_is_told_which(make_model, tokenizer, prompt_dataset, tmp_path, style):
    """A reward reading a column the dataset lacks is told the column and the rows' columns, not to fix itself."""

    def by_parameter(completions, solution, **kwargs):
        return [0.0] * len(completions)

    def by_kwargs(completions, **kwargs):
        return [float(s == "1") for s in kwargs["solution"]]

    reward = by_parameter if style == "parameter" else by_kwargs
    trainer = build(make_model, tokenizer, prompt_dataset, tmp_path, reward=[reward])
    with pytest.raises(RewardFunctionError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "'solution'" in message and "answer" in message  # the missing column, and the columns the rows have
    assert "add or rename" in message.lower() and "Fix the function" not in message


def test_a_raising_async_reward_function_is_named_too(make_model, tokenizer, prompt_dataset, tmp_path):
    async def async_reward(completions, **kwargs):
        raise ValueError("judge unreachable")

    trainer = build(make_model, tokenizer, prompt_dataset, tmp_path, reward=async_reward)
    with pytest.raises(RewardFunctionError, match="'async_reward' raised at training step 1: ValueError") as caught:
        trainer.train()
    assert isinstance(caught.value.__cause__, ValueError)
    assert trainer.reward_funcs == [async_reward]  # the guard is in place only while the rewards are computed


@pytest.mark.parametrize("error", [RuntimeError("NCCL watchdog timeout"), torch.OutOfMemoryError("CUDA OOM")])
def test_other_errors_in_reward_computation_pass_through(
    make_model, tokenizer, prompt_dataset, tmp_path, monkeypatch, error
):
    def failing_gather(tensor):
        raise error

    # TRL gathers the reward matrix across processes inside _calculate_rewards, after the reward functions ran.
    monkeypatch.setattr(grpo_module, "gather", failing_gather)
    trainer = build(make_model, tokenizer, prompt_dataset, tmp_path)
    with pytest.raises(type(error)) as caught:
        trainer.train()
    assert caught.value is error


# ---------------------------------------------------------------------------------------------------- stale rounds


@pytest.mark.parametrize("overrides", [{"advantage_estimator": "loo"}, {"dynamic_sampling": True}])
def test_a_round_without_rewards_is_an_error_not_the_previous_rounds_rewards(
    make_model, tokenizer, prompt_dataset, tmp_path, overrides
):
    trainer = build(make_model, tokenizer, prompt_dataset, tmp_path, **overrides)
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 1) for _ in range(trainer.num_generations)]
    trainer._generate_and_score_completions([dict(row) for row in rows])
    # A code path of TRL that scores without our _calculate_rewards (emulated: call TRL's directly).
    trainer._calculate_rewards = lambda *args: GRPOTrainer._calculate_rewards(trainer, *args)
    with pytest.raises(RuntimeError, match="_calculate_rewards"):
        trainer._generate_and_score_completions([dict(row) for row in rows])
