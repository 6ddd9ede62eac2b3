"""What ``diagnostics=True`` adds to `DAPOTrainer`: the ``time/`` split of each optimizer step, and one generation
batch's ``groups/``, ``length/``, ``cost/`` and token metrics. The values come from `core.metrics`; this module
gathers their inputs across processes and logs them into TRL's metric buffers.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from .core.advantages import combine_rewards
from .core.metrics import (
    StepTimer,
    allocated_memory_gb,
    generation_cost,
    group_metrics,
    length_metrics,
    peak_memory_gb,
    token_metrics,
)
from .metric_names import N

SECTIONS = ("generation", "reward", "scoring", "update")


class Diagnostics:
    """The trainer's diagnostics (``trainer.diagnostics``): a step timer with its callback, and the batch metrics."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.step_timer = StepTimer(SECTIONS)
        trainer.add_callback(DiagnosticsCallback(trainer, self.step_timer))

    def timed(self, section: str):
        """A section of the step timer (one of :data:`SECTIONS`); nested sections are charged to themselves."""
        return self.step_timer.section(section)

    def task_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """The weighted task reward of each row (every column but the overlong penalty's)."""
        indices = self.trainer.task_reward_indices
        return combine_rewards(rewards_per_func[:, indices], self.trainer.reward_weights[indices])

    def log_batch(
        self, attempted, update_rewards, lengths, truncated, batch, completion_ids, generated_completion_ids
    ) -> None:
        """One generation batch's groups/, length/ and cost/ metrics.

        ``attempted``: gathered reward matrices of every round (groups/ describes all attempted groups: how hard the
        prompts are); the other arguments describe this process's update batch (length/ and cost/).
        """
        trainer = self.trainer
        args, device, gather = trainer.args, trainer.accelerator.device, trainer.accelerator.gather
        metrics = group_metrics(
            self.task_rewards(torch.cat(attempted)),
            trainer.num_generations,
            success_threshold=args.diagnostics_success_threshold,
            k=args.diagnostics_pass_k,
        )
        penalty = None
        if trainer.overlong_column is not None:  # NaN on unscorable rows, which the length/ means leave out
            penalty = gather(update_rewards[:, trainer.overlong_column].to(device)).cpu()
        metrics.update(
            length_metrics(
                gather(lengths.to(device)).cpu(),
                gather(truncated.to(device)).cpu(),
                task_rewards=gather(self.task_rewards(update_rewards).to(device)).cpu(),
                penalty=penalty,
                max_length=args.max_completion_length if penalty is not None else None,
                buffer_length=args.overlong_buffer_length if penalty is not None else None,
                success_threshold=args.diagnostics_success_threshold,
            )
        )
        # Padding and loss tokens of the update batch (this process); the mask before mask_truncated_completions
        # is rebuilt from the raw completion lengths.
        completion_mask = batch["completion_mask"]
        raw_lengths = torch.tensor([len(ids) for ids in completion_ids], device=completion_mask.device)
        positions = torch.arange(completion_mask.shape[1], device=completion_mask.device)
        metrics.update(
            token_metrics(
                batch["prompt_mask"],
                (positions.unsqueeze(0) < raw_lengths.unsqueeze(1)).long(),
                loss_mask=completion_mask * batch.get("tool_mask", 1),
            )
        )
        local_tokens = sum(len(ids) for round_ids in generated_completion_ids for ids in round_ids)
        generated_tokens = int(gather(torch.tensor([local_tokens], device=device)).sum())
        retained_groups = len(lengths) // trainer.num_generations * trainer.accelerator.num_processes
        metrics.update(generation_cost(generated_tokens, retained_groups))
        for key, value in metrics.items():
            trainer._metrics["train"][key].append(value)


class DiagnosticsCallback(TrainerCallback):
    """time/ split per optimizer step: the optimizer step counts as update; the rest outside sections is other."""

    def __init__(self, trainer: Any, step_timer: StepTimer):
        self.trainer = trainer
        self.step_timer = step_timer
        self._optimizer_section = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_timer.reset()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._optimizer_section = self.step_timer.section("update")
        self._optimizer_section.__enter__()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._optimizer_section is not None:
            self._optimizer_section.__exit__(None, None, None)
            self._optimizer_section = None

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.trainer._metrics["train"]
        for key, value in self.step_timer.metrics().items():
            metrics[key].append(value)
        # The peak counter is never reset here: it is the process's (and train_summary.json reads it at the end),
        # so the logged peak is the run's so far; the memory still held at the step's end shows a leak per step.
        peak = peak_memory_gb()
        if peak is not None:
            metrics[N.COST_PEAK_MEMORY_GB].append(peak)
            metrics[N.COST_MEMORY_ALLOCATED_GB].append(allocated_memory_gb())
