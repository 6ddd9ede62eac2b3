"""`DAPOTrainer`: TRL's `GRPOTrainer` with DAPO's extensions, each switched on by a `DAPOConfig` field.

Overridden `GRPOTrainer` methods (pinned in `compat.py`) and why:

* ``__init__``: accepts a plain ``trl.GRPOConfig``; appends the overlong penalty as one more reward function, so it is
  added to the reward before advantages, logged on its own, and works with every generation backend.
* ``_calculate_rewards``: calls ``super()`` and keeps the gathered ``(N_global, n_funcs)`` reward matrix, which TRL
  does not return from a generation round.
* ``_generate_and_score_completions``: calls ``super()`` for the round, then replaces ``advantages`` when the config
  asks for leave-one-out baselines or the population standard deviation (`advantages.group_advantages`).

Nothing else is touched: loss, generation, logging and the optimizer are TRL's. With every extension field at its
default, the trainer computes exactly what ``trl.GRPOTrainer`` computes.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id

from . import compat
from .advantages import combine_rewards, group_advantages
from .config import DAPOConfig, as_dapo_config
from .overlong import OverlongPenalty


class DAPOTrainer(GRPOTrainer):
    """Drop-in `trl.GRPOTrainer` with DAPO extensions; see `DAPOConfig` for the fields that switch them on.

    Example:
        >>> from trl_dapo_ext import DAPOConfig, DAPOTrainer
        >>> args = DAPOConfig("out", advantage_estimator="loo", overlong_buffer_length=64)  # doctest: +SKIP
        >>> DAPOTrainer(model, reward_funcs=[my_reward], args=args, train_dataset=ds).train()  # doctest: +SKIP
    """

    _tag_names = ["trl", "grpo", "dapo"]

    def __init__(self, model, reward_funcs=None, args: GRPOConfig | None = None, **kwargs: Any):
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = DAPOConfig(f"{model_name.split('/')[-1]}-GRPO")
        args = as_dapo_config(args)
        super().__init__(model, reward_funcs, args=args, **kwargs)
        compat.check_private_attributes(self)

        # Rewards of the latest round, gathered over processes: (N_global, n_funcs), identical on every rank.
        self._last_rewards_per_func: torch.Tensor | None = None
        # Columns of the reward matrix that score the task (everything but our overlong penalty).
        self.task_reward_indices = list(range(len(self.reward_funcs)))
        if args.overlong_buffer_length is not None:
            self._append_reward_function(
                OverlongPenalty(args.max_completion_length, args.overlong_buffer_length, args.overlong_penalty_factor)
            )

    def _append_reward_function(self, reward_func, weight: float = 1.0) -> None:
        # After super().__init__ (its reward_weights length check counts only the user's functions), the same way
        # TRL itself appends environment rewards.
        self.reward_funcs.append(reward_func)
        self.reward_func_names.append(reward_func.__name__)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.tensor([weight], dtype=torch.float32)])

    @property
    def recomputes_advantages(self) -> bool:
        return self.args.advantage_estimator != "grpo" or self.args.reward_std != "sample"

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor | Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.recomputes_advantages:
            output["advantages"] = self._local_advantages(self._last_rewards_per_func, local_rows=len(inputs))
        return output

    def _local_advantages(self, rewards_per_func: torch.Tensor, local_rows: int) -> torch.Tensor:
        """Advantages of this rank's rows from the gathered reward matrix, with the configured estimator."""
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = combine_rewards(rewards_per_func, self.reward_weights)
        advantages = group_advantages(
            rewards,
            num_generations,
            estimator=self.args.advantage_estimator,
            scale=self.args.scale_rewards,
            std=self.args.reward_std,
        )
        # The completions table (log_completions) should show the advantages actually trained on.
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        start = self.accelerator.process_index * local_rows
        return advantages[start : start + local_rows]
