"""Runs bounded by generation (``max_generated_completions``): the stop, the lr schedule's unit, the checkpointed count.

With dynamic sampling a step costs a variable number of generated completions, so ``max_steps`` and a step-based lr
schedule no longer fix a run's compute. With a budget of completions the run stops at the first optimizer step end at
which the completions charged so far reach it, and the lr schedule is the one of ``ceil(budget / per_step)``
plain GRPO steps evaluated at ``charged / per_step``, where ``per_step`` is what a plain GRPO step generates
(`plain_step_completions`).

A generation batch is charged as it is trained, not when it is generated (`BudgetMeter`): TRL generates once per
``steps_per_generation * num_iterations`` micro-batches, and each micro-batch of that cycle is charged its share of
the cycle's completions. A cycle's completions are charged in full once its last micro-batch has run, so a run never
stops with a generation batch half trained, and for plain GRPO the charge after ``s`` optimizer steps is exactly
``s * per_step``: the step schedule of a ``max_steps`` run, for every ``num_iterations`` and ``steps_per_generation``.
A dynamic-sampling run, which spends its budget in fewer, dearer steps, anneals over the same budget.

`DAPOTrainer`'s ``generated_completions`` counts every training generation round's rows, every process's (the
number logged as ``dynamic_sampling/generated_completions``, summed over steps), the same on every rank. The meter's
state is saved beside each process's RNG state in every checkpoint and restored on resume.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import IntervalStrategy, SaveStrategy, get_last_checkpoint

from .dynamic_sampling.state import refill_state_file

BUDGET_STATE_FILE = "dapo_generation_budget.json"


def plain_step_completions(args: Any) -> float:
    """Completions plain GRPO generates per optimizer step, every process's: the generation batch, once every
    ``steps_per_generation * num_iterations`` micro-batches (``gradient_accumulation_steps`` of them a step).

    Example:
        >>> from types import SimpleNamespace as Args
        >>> plain_step_completions(Args(generation_batch_size=32, gradient_accumulation_steps=2,
        ...                             steps_per_generation=2, num_iterations=1))
        32.0
        >>> plain_step_completions(Args(generation_batch_size=32, gradient_accumulation_steps=1,
        ...                             steps_per_generation=1, num_iterations=2))
        16.0
    """
    cycle_steps = args.steps_per_generation * args.num_iterations / args.gradient_accumulation_steps
    return args.generation_batch_size / cycle_steps


def schedule_steps(budget: int, per_step: float) -> int:
    """Plain GRPO steps that generate ``budget`` completions (the last one may pass it): the schedule's length.

    >>> schedule_steps(100, 32.0), schedule_steps(96, 32.0)
    (4, 3)
    """
    return math.ceil(budget / per_step)


def schedule_position(completions: int, per_step: float) -> float:
    """Where a step schedule is evaluated after ``completions``: in plain GRPO steps (exact at whole steps).

    >>> schedule_position(64, 32.0), schedule_position(80, 32.0)
    (2.0, 2.5)
    """
    return completions / per_step


class BudgetMeter:
    """Completions charged against the budget: whole generation cycles, and the trained share of the current one.

    ``micro_batches_per_cycle``: TRL's ``steps_per_generation * num_iterations``, the micro-batches one generation
    batch serves. Call :meth:`start_cycle` when a training generation batch is made, :meth:`add` for its rounds'
    completions and :meth:`consume` once per training micro-batch.

    Example (one cycle of 32 completions serves 4 micro-batches, 2 per optimizer step):
        >>> meter = BudgetMeter(micro_batches_per_cycle=4)
        >>> meter.start_cycle(); meter.add(32)
        >>> meter.consume(); meter.consume(); meter.charged()  # one optimizer step: half the cycle
        16.0
        >>> meter.consume(); meter.consume(); meter.charged()
        32.0
    """

    def __init__(self, micro_batches_per_cycle: int):
        self.micro_batches_per_cycle = micro_batches_per_cycle
        self.done = 0.0  # charged for the cycles before the current one
        self.cycle = 0  # completions of the current cycle
        self.consumed = 0  # micro-batches of the current cycle trained on

    def start_cycle(self) -> None:
        self.done = self.charged()
        self.cycle = self.consumed = 0

    def add(self, completions: int) -> None:
        self.cycle += completions

    def consume(self) -> None:
        self.consumed += 1

    def charged(self) -> float:
        share = min(self.consumed / self.micro_batches_per_cycle, 1.0)
        return self.done + self.cycle * share

    def state_dict(self) -> dict[str, float]:
        return {"charged": self.charged()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        # A resumed run makes a new generation batch at its first step (TRL keeps no buffer in checkpoints).
        self.done, self.cycle, self.consumed = float(state["charged"]), 0, 0


def on_completions(schedules: list, completions, per_step: float) -> list:
    """A ``LambdaLR``'s multiplier functions, each evaluated at `schedule_position` of ``completions()`` instead of
    the step count. Plain closures: ``LambdaLR.state_dict`` saves nothing of them (the count is saved on its own)."""

    def wrapped(schedule):
        return lambda _step: schedule(schedule_position(completions(), per_step))

    return [wrapped(schedule) for schedule in schedules]


class GenerationBudgetCallback(TrainerCallback):
    """Stops training at the first step end with ``max_generated_completions`` generated (and, as ``max_steps`` does,
    saves and evaluates there under a step strategy); warns when ``max_steps`` ended the run first."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer.budget_meter.charged() < args.max_generated_completions:
            return control
        control.should_training_stop = True
        if args.save_strategy == SaveStrategy.STEPS:
            control.should_save = True
        if (
            args.eval_strategy == IntervalStrategy.STEPS
            and state.global_step % state.eval_steps != 0
            and args.eval_delay <= state.global_step
        ):
            control.should_evaluate = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        generated = self.trainer.generated_completions
        if (
            self.trainer.budget_meter.charged() < args.max_generated_completions
            and state.global_step >= state.max_steps
        ):
            warnings.warn(
                f"max_steps={state.max_steps} ended the run after {generated} generated completions, before "
                f"max_generated_completions={args.max_generated_completions}; raise max_steps (or leave it at -1 "
                "where it can be derived) to spend the whole budget.",
                stacklevel=2,
            )


def save_generation_budget(trainer: Any, folder: str) -> None:
    """Write the count into a checkpoint ``folder``, one file per process beside its RNG state."""
    args = trainer.args
    path = os.path.join(folder, refill_state_file(args.process_index, args.world_size, BUDGET_STATE_FILE))
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(
            {"generated_completions": trainer.generated_completions, **trainer.budget_meter.state_dict()}, handle
        )
    os.replace(partial, path)


def resume_generation_budget(trainer: Any, resume_from_checkpoint: str | bool) -> None:
    """Restore the count from the checkpoint ``train`` resumes from; without its file, raise (the budget would be
    spent twice)."""
    args = trainer.args
    checkpoint = get_last_checkpoint(args.output_dir) if resume_from_checkpoint is True else resume_from_checkpoint
    name = refill_state_file(args.process_index, args.world_size, BUDGET_STATE_FILE)
    if not checkpoint:  # resume_from_checkpoint=True and none there: Trainer raises its own error
        return
    path = os.path.join(checkpoint, name)
    if not os.path.isfile(path):
        raise ValueError(
            f"max_generated_completions is set, but the checkpoint {checkpoint} has no {name} (saved by a run with "
            "max_generated_completions): its generated completions are unknown. Resume it without "
            "max_generated_completions (bounded by max_steps), or start the budgeted run afresh."
        )
    with open(path) as handle:
        state = json.load(handle)
    trainer.generated_completions = int(state["generated_completions"])
    trainer.budget_meter.load_state_dict({"charged": state.get("charged", trainer.generated_completions)})
