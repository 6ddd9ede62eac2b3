"""Assembly of one update batch from whole groups of several rounds, and TRL's batch metrics recomputed on it.

Each generation round returns its own padded tensors (prompt widths and completion widths differ per round), so
rows kept from several rounds are re-padded to a common width: prompt-side keys on the left, completion-side keys
on the right, with the pad value TRL uses for each key. A key this module does not know raises instead of being
concatenated wrongly: new TRL keys must be classified here first (and `compat.py` checks TRL's returned keys
against these lists).

`GRPOTrainer` logs its batch metrics (`completions/*`, `rewards/*`, `reward`, `frac_reward_zero_std`) once per
generation call. With dynamic sampling a step makes several calls, most of whose rows are dropped, so
:func:`trl_batch_metrics` recomputes them on the batch actually trained on, following TRL 1.16's `_generate` and
`_generate_and_score_completions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object

from ..core.advantages import combine_rewards, nan_std
from ..core.groups import fill_priority, group_reward_spread
from ..core.loss import masked_rows_loss_scale

# key -> pad value, the value TRL 1.16's own batch holds at a padded position; None = the tokenizer's pad token id.
PROMPT_KEYS: dict[str, int | None] = {"prompt_ids": None, "prompt_mask": 0}
COMPLETION_KEYS: dict[str, float | int | None] = {
    "completion_ids": None,
    "completion_mask": 0,
    # Model log-probabilities at padding: TRL holds whatever the forward pass gave there, and every use masks them.
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,  # TRL pads vLLM's log-probabilities with 0.0
    # exp((old - sampling) * mask) = 1 at padding. Not masked by every reader: VESPO's gamma weights sum
    # log(ratio) over all positions, so any other value (0.0 becomes log(1e-8) per column) changes the row's weight.
    "importance_sampling_ratio": 1.0,
    "tool_mask": 1,  # TRL pads tool_mask with 1: padding is excluded by completion_mask
}
# An old log-probability to be read from the loss pass itself (detached), as TRL does for an on-policy batch.
ON_POLICY = float("nan")
ROW_KEYS = ("advantages",)
SCALAR_KEYS = ("num_items_in_batch",)
# Ours, not TRL's: put into a batch that holds masked fill rows when the loss type divides by its rows (a 0-dim tensor,
# which TRL's shuffle and split hand to every micro-batch unchanged); DAPOTrainer.compute_loss applies it.
LOSS_SCALE_KEY = "dapo_ext_loss_scale"
MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "image_position_ids",
    "token_type_ids",
    "mm_token_type_ids",
    "num_images",
    "num_tiles",
)


class UnsupportedBatchKey(NotImplementedError):
    """The generation round returned a key that dynamic sampling cannot select rows of."""


def check_keys(batch: dict[str, Any]) -> None:
    known = set(PROMPT_KEYS) | set(COMPLETION_KEYS) | set(ROW_KEYS) | set(SCALAR_KEYS)
    multimodal = [key for key in batch if key in MULTIMODAL_KEYS]
    if multimodal:
        raise UnsupportedBatchKey(
            f"dynamic_sampling does not support multimodal inputs yet (the batch has {multimodal}); "
            "set dynamic_sampling=False for vision-language training."
        )
    unknown = [key for key in batch if key not in known]
    if unknown:
        raise UnsupportedBatchKey(
            f"dynamic_sampling does not know how to select rows of {unknown} (a newer TRL key?); "
            "add it to trl_dapo_ext/dynamic_sampling/assembly.py or set dynamic_sampling=False."
        )


def select_rows(batch: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """The given rows of every per-row tensor; scalars are dropped (they must be recomputed for the new rows)."""
    check_keys(batch)
    return {
        key: value.index_select(0, rows.to(value.device))
        for key, value in batch.items()
        if key not in SCALAR_KEYS and value is not None
    }


def concat_rows(batches: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate row-selected batches, re-padding prompt keys on the left and completion keys on the right.

    Old log-probabilities may be missing from some batches only: their rows are on-policy and get `ON_POLICY`
    (pipelined screening keeps them for its carried rows alone; `DAPOTrainer.compute_loss` fills the marked rows)."""
    if not batches:
        raise ValueError("nothing to concatenate")
    batches = _mark_on_policy(batches)
    keys = list(batches[0])
    for batch in batches[1:]:
        if set(batch) != set(keys):
            raise ValueError(f"rounds returned different keys: {keys} vs {list(batch)}")
    merged = {}
    for key in keys:
        tensors = [batch[key] for batch in batches]
        if key in PROMPT_KEYS or key in COMPLETION_KEYS:
            side = "left" if key in PROMPT_KEYS else "right"
            pad = {**PROMPT_KEYS, **COMPLETION_KEYS}[key]
            merged[key] = _pad_and_cat(tensors, pad_token_id if pad is None else pad, side)
        else:
            merged[key] = torch.cat(tensors, dim=0)
    return merged


def _mark_on_policy(batches: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """Where some batches hold ``old_per_token_logps`` and others not, give the others `ON_POLICY` rows."""
    key = "old_per_token_logps"
    if all(key in batch for batch in batches) or not any(key in batch for batch in batches):
        return batches
    return [
        batch
        if key in batch
        else {
            **batch,
            key: torch.full(batch["completion_ids"].shape, ON_POLICY, device=batch["completion_ids"].device),
        }
        for batch in batches
    ]


def _pad_and_cat(tensors: list[torch.Tensor], value: float | int, side: str) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    padded = []
    for tensor in tensors:
        missing = width - tensor.shape[1]
        if missing:
            filler = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
            tensor = torch.cat([filler, tensor] if side == "left" else [tensor, filler], dim=1)
        padded.append(tensor)
    return torch.cat(padded, dim=0)


# ------------------------------------------------------------------------------------------ TRL's batch metrics

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


# ----------------------------------------------------------------------------------------------- batch assembly


@dataclass
class ScoredRound:
    """What one generation round left behind, beyond TRL's output dict (local rows unless noted)."""

    rewards_per_func: torch.Tensor  # gathered over processes: (N_global, n_funcs)
    completion_ids: list[list[int]]
    lengths: torch.Tensor  # model tokens, as TRL's completions/*_length count them (core.metrics.completion_lengths)
    truncated: torch.Tensor  # hit the length cap before EOS (TRL's is_truncated)


@dataclass
class SelectedGroups:
    """Whole groups selected from one round, ready to be concatenated into the update batch."""

    batch: dict[str, Any]
    rewards_per_func: torch.Tensor  # (rows, n_funcs)
    lengths: torch.Tensor  # model tokens (TRL's length metrics)
    truncated: torch.Tensor
    completion_ids: list[list[int]]
    origin: list[tuple[int, int, int]]  # (round, round's rows per process, local row) for the completions table
    filled: bool = False  # uninformative groups completing a batch the budget could not fill: masked out of the loss


@dataclass
class BatchRows:
    """Per-row values of an assembled update batch that TRL's output dict does not carry (local rows)."""

    rewards_per_func: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    completion_ids: list[list[int]]
    filled: torch.Tensor
    origin: list[tuple[int, int, int]]
    global_advantages: torch.Tensor


@dataclass
class RoundRows:
    """One round's output on this process, from which groups are selected."""

    output: dict[str, Any]  # TRL's batch of the round
    scored: ScoredRound
    local_rewards: torch.Tensor  # this process's rows of the reward matrix
    round_index: int
    local_count: int  # the round's rows on this process

    def select(self, group_ids: torch.Tensor, num_generations: int, filled: bool = False) -> SelectedGroups:
        """The whole groups ``group_ids`` (local group numbers) of this round."""
        G = num_generations
        return self.take((group_ids.unsqueeze(1) * G + torch.arange(G)).flatten(), filled)

    def take(self, rows: torch.Tensor, filled: bool = False) -> SelectedGroups:
        """The local ``rows`` of this round, in that order (screening: a prompt's probes or its completion)."""
        row_list = rows.tolist()
        return SelectedGroups(
            batch=select_rows(self.output, rows),
            rewards_per_func=self.local_rewards.index_select(0, rows.to(self.local_rewards.device)),
            lengths=self.scored.lengths.index_select(0, rows),
            truncated=self.scored.truncated.index_select(0, rows),
            completion_ids=[self.scored.completion_ids[i] for i in row_list],
            origin=[(self.round_index, self.local_count, i) for i in row_list],
            filled=filled,
        )


FillCandidate = tuple[tuple, SelectedGroups]  # (priority key, one uninformative group)


def best_fill_candidates(
    candidates: list[FillCandidate],
    round_rows: RoundRows,
    filter_rewards: torch.Tensor,
    informative: torch.Tensor,
    num_generations: int,
    room: int,
) -> list[FillCandidate]:
    """The best uninformative groups seen so far, ``candidates`` and this round's, never more than ``room`` (what
    the batch could still need).

    ``room`` only shrinks as informative groups are kept, so groups pruned now can never be needed later. Best
    first: the widest reward spread, then the earliest round, then `core.groups.fill_priority`'s order.
    """
    G = num_generations
    spread, _ = group_reward_spread(filter_rewards, G)
    fresh = [
        ((-spread[group_id].item(), round_rows.round_index, order), group_id)
        for order, group_id in enumerate(fill_priority(filter_rewards, G).tolist())
        if not informative[group_id]
    ]
    ranked = sorted(candidates + fresh, key=lambda candidate: candidate[0])[: max(room, 0)]
    return [
        (
            key,
            item if isinstance(item, SelectedGroups) else round_rows.select(torch.tensor([item]), G, filled=True),
        )
        for key, item in ranked
    ]


def assemble(
    parts: list[SelectedGroups],
    *,
    pad_token_id: int,
    accelerator: Any,
    advantages: Callable[[torch.Tensor], torch.Tensor],
    loss_type: str,
    mask_unscored: bool = False,
) -> tuple[dict[str, Any], BatchRows]:
    """Concatenate the selected groups into one update batch; recompute its advantages (``advantages``: gathered
    reward matrix to every row's advantage), the loss mask of filled groups and the loss denominator.
    ``mask_unscored``: rows that a reward function left unscored (None, NaN in the matrix) are masked too."""
    batch = concat_rows([part.batch for part in parts], pad_token_id=pad_token_id)
    rewards_per_func = torch.cat([part.rewards_per_func for part in parts])
    filled = torch.cat([torch.full((len(part.origin),), part.filled) for part in parts])
    masked = filled | torch.isnan(rewards_per_func).any(dim=1).cpu() if mask_unscored else filled
    device = batch["completion_mask"].device

    # Filled groups (and unscored rows) are masked out of the loss: zero tool_mask rows (it only enters the loss mask).
    if masked.any():
        if "tool_mask" not in batch:
            batch["tool_mask"] = torch.ones_like(batch["completion_mask"])
        batch["tool_mask"][masked.to(device)] = 0

    # Advantages on the final batch: batch-level statistics (scale_rewards="batch", normalize_then_sum) change
    # when groups are dropped. Masked rows are left out of every statistic (NaN) and get advantage 0.
    scored = rewards_per_func.clone()
    scored[masked.to(scored.device)] = torch.nan
    global_advantages = advantages(accelerator.gather(scored.to(device)))
    start = accelerator.process_index * len(filled)
    batch["advantages"] = global_advantages[start : start + len(filled)].to(device)

    # The dapo/cispo/vespo losses divide by the global number of loss tokens of this batch.
    loss_mask = batch["completion_mask"] * batch.get("tool_mask", 1)
    batch["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    # The grpo/sapo/luspo/dr_grpo losses count rows, masked or not: the factor that takes the masked rows out.
    masked_rows = int(accelerator.gather(masked.sum().reshape(1).to(device)).sum())
    scale = masked_rows_loss_scale(loss_type, rows=len(filled) * accelerator.num_processes, masked_rows=masked_rows)
    if scale != 1.0:
        batch[LOSS_SCALE_KEY] = torch.tensor(scale, device=device)

    rows = BatchRows(
        rewards_per_func=rewards_per_func,
        lengths=torch.cat([part.lengths for part in parts]),
        truncated=torch.cat([part.truncated for part in parts]),
        completion_ids=[ids for part in parts for ids in part.completion_ids],
        filled=filled,
        origin=[origin for part in parts for origin in part.origin],
        global_advantages=global_advantages,
    )
    return batch, rows


def replace_trl_metrics(
    train_metrics: dict[str, list[float]],
    metric_marks: dict[str, int],
    rows: BatchRows,
    *,
    gather: Callable[[torch.Tensor], torch.Tensor],
    device: Any,
    reward_weights: torch.Tensor,
    reward_func_names: Sequence[str],
    num_generations: int,
    scale_rewards: str,
) -> None:
    """Replace TRL's per-call batch metrics of this step's rounds (logged since ``metric_marks``) with one value
    computed on the update batch, instead of an average over discarded attempts."""
    trl_metrics = trl_batch_metrics(
        lengths=gather(rows.lengths.to(device)).cpu(),
        truncated=gather(rows.truncated.to(device)).cpu(),
        rewards_per_func=gather(rows.rewards_per_func.to(device)).cpu(),
        weights=reward_weights,
        reward_func_names=reward_func_names,
        num_generations=num_generations,
        scale_rewards=scale_rewards,
    )
    for key, value in trl_metrics.items():
        if key in RECOMPUTED_KEYS or key.startswith("rewards/"):
            del train_metrics[key][metric_marks.get(key, 0) :]
            train_metrics[key].append(value)


def rebuild_completion_logs(
    logs: dict[str, Any],
    round_logs: dict[int, dict],
    rows: BatchRows,
    *,
    accelerator: Any,
    reward_func_names: Sequence[str],
) -> None:
    """Fill TRL's completions-table buffers ``logs`` with the update batch's rows, in global row order, instead of
    the last rounds' rows (``round_logs``: each round's own buffers)."""
    origins = gather_object([(accelerator.process_index, *origin) for origin in rows.origin])
    rewards = accelerator.gather(rows.rewards_per_func.to(accelerator.device)).cpu()
    for value in logs.values():
        value.clear()
    for row, (rank, round_index, local_count, local_row) in enumerate(origins):
        source, index = round_logs[round_index], rank * local_count + local_row
        logs["prompt"].append(source["prompt"][index])
        logs["completion"].append(source["completion"][index])
        for column, values in source["extra"].items():
            logs["extra"][column].append(values[index] if index < len(values) else None)
        for func_index, name in enumerate(reward_func_names):
            logs["rewards"][name].append(rewards[row, func_index].item())
    logs["advantages"].extend(rows.global_advantages.tolist())
