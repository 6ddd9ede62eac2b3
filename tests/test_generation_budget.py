"""Runs bounded by generation (max_generated_completions): the stop, the lr schedule on completions, resume, errors."""

from __future__ import annotations

from itertools import accumulate
from types import SimpleNamespace

import pytest
import torch
from helpers import digit_fraction_reward, grpo_kwargs, tiny_trainer
from test_dynamic_sampling import build, ds_logs, kinds_dataset
from test_resume import after_checkpoint
from transformers import TrainerCallback, get_scheduler

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.generation_budget import BUDGET_STATE_FILE, plain_step_completions, resume_generation_budget
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer

PER_STEP = 8  # per_device_train_batch_size=8 rows (2 prompts x G=4), one process, one generation per step


class CountsAtStepEnd(TrainerCallback):
    """``trainer.generated_completions`` at every step end."""

    def __init__(self, trainer):
        self.trainer, self.counts = trainer, []
        trainer.callback_handler.callbacks.insert(0, self)

    def on_step_end(self, args, state, control, **kwargs):
        self.counts.append(self.trainer.generated_completions)


class ChargedAtStepEnd(CountsAtStepEnd):
    """What the budget was charged at every step end."""

    def on_step_end(self, args, state, control, **kwargs):
        self.counts.append(self.trainer.budget_meter.charged())


def step_schedule(name: str, steps: int, **kwargs):
    """The step schedule transformers builds for ``steps`` steps: its multiplier function."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    return get_scheduler(name, optimizer, num_training_steps=steps, **kwargs).lr_lambdas[0]


def logged_lrs(trainer, after: int = 0) -> list[float]:
    return [h["learning_rate"] for h in trainer.state.log_history if "loss" in h and h["step"] > after]


def config(tmp_path, **overrides) -> DAPOConfig:
    return DAPOConfig(**grpo_kwargs(tmp_path, **{"max_steps": -1, **overrides}))


# ---------------------------------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------------------------------


def test_max_steps_is_derived_from_the_budget(tmp_path):
    assert config(tmp_path, max_generated_completions=20).max_steps == 3  # ceil(20 / 8)
    assert config(tmp_path, max_generated_completions=24).max_steps == 3
    # num_iterations=2: a generation batch serves two steps, so a plain step costs half of it
    assert config(tmp_path, max_generated_completions=24, num_iterations=2).max_steps == 6
    assert config(tmp_path).max_steps == -1  # no budget: untouched
    # a fixed budget of full groups (no screening) generates exactly a plain step's completions
    fixed = dict(dynamic_sampling=True, dynamic_sampling_fixed_budget=True)
    assert config(tmp_path, max_generated_completions=20, **fixed).max_steps == 3


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(max_generated_completions=0), "must be an int >= 1"),
        (dict(max_generated_completions=True), "must be an int >= 1"),
        (
            dict(max_generated_completions=10, lr_scheduler_type="reduce_lr_on_plateau", eval_strategy="steps"),
            "needs a step schedule",
        ),
        (dict(max_generated_completions=20, max_steps=2), "max_steps=2 and max_generated_completions=20 disagree"),
        (
            dict(max_generated_completions=20, dynamic_sampling=True, dynamic_sampling_screen_generations=2),
            "max_steps cannot be derived",
        ),
        (
            dict(
                max_generated_completions=20,
                dynamic_sampling=True,
                dynamic_sampling_fixed_budget=True,
                dynamic_sampling_screen_generations=2,
            ),
            "max_steps cannot be derived",
        ),
    ],
)
def test_bad_budget_configs_fail_at_construction(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **overrides)


def test_a_given_max_steps_caps_dynamic_sampling_and_screening(tmp_path):
    assert config(tmp_path, max_generated_completions=80, dynamic_sampling=True, max_steps=2).max_steps == 2
    screening = dict(dynamic_sampling=True, dynamic_sampling_screen_generations=2, max_steps=20)
    assert config(tmp_path, max_generated_completions=80, **screening).max_steps == 20
    assert config(tmp_path, max_generated_completions=20, max_steps=5).max_steps == 5  # plain: past the budget is fine


def test_resuming_a_checkpoint_without_the_count_raises(tmp_path):
    args = SimpleNamespace(output_dir=str(tmp_path), process_index=0, world_size=1)
    trainer = SimpleNamespace(args=args, generated_completions=0)
    with pytest.raises(ValueError, match=f"has no {BUDGET_STATE_FILE}"):
        resume_generation_budget(trainer, str(tmp_path))


# ---------------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, steps",
    [
        ({}, 3),
        (dict(num_iterations=2), 3),  # a generation batch serves 2 steps: the run stops half-way through one
        (dict(num_iterations=2), 4),
        (dict(steps_per_generation=2), 4),  # one micro-batch per step, two per generation batch
        (dict(steps_per_generation=4, gradient_accumulation_steps=2), 3),
        (dict(steps_per_generation=2, gradient_accumulation_steps=2, num_iterations=3), 3),
    ],
    ids=["plain", "iterations-2-odd", "iterations-2", "generation-2", "generation-4-accumulation-2", "all"],
)
def test_plain_grpo_under_a_budget_is_the_max_steps_run(
    make_model, tokenizer, prompt_dataset, tmp_path, overrides, steps
):
    """Without dynamic sampling a budget of ``steps`` plain steps' completions is the ``steps``-step run, bit for bit
    (the same stop, the same linear schedule evaluated at charged completions / per step = the step count, the same
    parameters), also when one generation batch serves several optimizer steps: each is charged as it is trained."""
    schedule = dict(lr_scheduler_type="linear", warmup_steps=1, **overrides)
    reference = tiny_trainer(
        make_model(), digit_fraction_reward, prompt_dataset, tokenizer, tmp_path / "a", max_steps=steps, **schedule
    )
    reference.train()
    per_step = plain_step_completions(reference.args)
    budget = tiny_trainer(
        make_model(),
        digit_fraction_reward,
        prompt_dataset,
        tokenizer,
        tmp_path / "b",
        max_steps=-1,
        max_generated_completions=int(steps * per_step),
        **schedule,
    )
    charged = ChargedAtStepEnd(budget)
    budget.train()
    assert budget.args.max_steps == budget.state.global_step == reference.state.global_step == steps
    assert charged.counts == [per_step * (step + 1) for step in range(steps)]
    assert logged_lrs(budget) == logged_lrs(reference)
    linear = step_schedule("linear", steps, num_warmup_steps=1)
    assert logged_lrs(budget) == [5e-3 * linear(step) for step in range(steps)]
    for a, b in zip(reference.model.parameters(), budget.model.parameters(), strict=True):
        assert torch.equal(a, b)


BUDGETED = dict(
    max_steps=-1,
    max_generated_completions=60,
    lr_scheduler_type="cosine",
    warmup_steps=1,
    dynamic_sampling_skip_window=1,
)


def test_dynamic_sampling_stops_at_the_budget_with_the_schedule_on_completions(make_model, tokenizer, tmp_path):
    """Each step generates its own number of completions: the count is the logged one summed, the run stops at the
    first step end at or past the budget, and the lr is the 8-step schedule evaluated at completions / 8."""
    dataset = kinds_dataset(["right", "varying", "right"], repeat=8)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, dataset, **BUDGETED)
    assert trainer.args.max_steps == 8  # ceil(60 / 8): a refill step generates at least a plain step's completions
    counts = CountsAtStepEnd(trainer)
    trainer.train()
    logged = [h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] for h in ds_logs(trainer)]
    assert counts.counts == list(accumulate(logged))
    assert counts.counts[-1] >= 60 > counts.counts[-2]
    assert len(counts.counts) == trainer.state.global_step < 8  # refill spends the budget in fewer steps
    assert any(step > PER_STEP for step in logged)
    cosine = step_schedule("cosine", 8, num_warmup_steps=1)
    # A step trains with the lr of the completions generated before it (the scheduler steps at the step's end).
    before = [0, *counts.counts[:-1]]
    assert logged_lrs(trainer) == [5e-3 * cosine(count / PER_STEP) for count in before]


def test_a_budgeted_run_resumes_exactly(make_model, tokenizer, tmp_path):
    """The count is saved beside the RNG state and restored: the resumed run trains, counts and schedules the lr as
    the uninterrupted one did, and stops at the same step."""
    dataset = kinds_dataset(["right", "varying", "right"], repeat=8)
    resume = dict(BUDGETED, max_generated_completions=100, save_strategy="steps", save_steps=2)
    full, _, _ = build(make_model, tokenizer, tmp_path, dataset, **resume)
    full.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / BUDGET_STATE_FILE).is_file()
    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **resume)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.generated_completions == full.generated_completions >= 100
    assert resumed.state.global_step == full.state.global_step > 2
    assert after_checkpoint(resumed) == after_checkpoint(full) != []
    assert logged_lrs(resumed, after=2) == logged_lrs(full, after=2) != []
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
