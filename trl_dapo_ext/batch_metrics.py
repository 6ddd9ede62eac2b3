"""TRL's per-batch metrics (`completions/*`, `rewards/*`, `reward`, `frac_reward_zero_std`) for a given set of rows.

`GRPOTrainer` logs these once per generation call. With dynamic sampling a step makes several calls, most of whose
rows are dropped, so the trainer replaces the per-call values with these, computed on the batch actually trained on.
The arithmetic follows TRL 1.16's `_generate` and `_generate_and_score_completions`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .advantages import combine_rewards, nan_std

# Keys this module recomputes; every other TRL metric keeps its per-call values.
RECOMPUTED_KEYS = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
)


def trl_batch_metrics(
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    reward_func_names: Sequence[str],
    num_generations: int,
    scale_rewards: str,
) -> dict[str, float]:
    """TRL's metric values for rows given as global tensors (lengths, truncated flags, reward matrix)."""
    lengths = lengths.float()
    metrics = {
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": truncated.float().mean().item(),
    }
    terminated = lengths[~truncated.bool()]
    if terminated.numel() == 0:  # TRL's convention when nothing terminated
        terminated = torch.zeros(1)
    metrics["completions/mean_terminated_length"] = terminated.mean().item()
    metrics["completions/min_terminated_length"] = terminated.min().item()
    metrics["completions/max_terminated_length"] = terminated.max().item()

    for index, name in enumerate(reward_func_names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, index]).item()
        metrics[f"rewards/{name}/std"] = nan_std(rewards_per_func[:, index]).item()
    rewards = combine_rewards(rewards_per_func, weights)
    metrics["reward"] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nan_std(rewards).item()
    # TRL: fraction of rows whose std (group std, or the batch std under scale_rewards="batch") is ~0.
    if scale_rewards == "batch":
        std_rows = nan_std(rewards).expand_as(rewards)
    else:
        std_rows = nan_std(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    metrics["frac_reward_zero_std"] = torch.isclose(std_rows, torch.zeros_like(std_rows)).float().mean().item()
    return metrics
