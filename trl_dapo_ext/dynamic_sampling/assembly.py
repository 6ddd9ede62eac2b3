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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object

from ..core.advantages import combine_rewards, nan_std
from ..core.groups import fill_priority, group_reward_spread
from ..core.loss import masked_rows_loss_scale

# key -> (side, pad value); None = the tokenizer's pad token id.
PROMPT_KEYS: dict[str, int | None] = {"prompt_ids": None, "prompt_mask": 0}
COMPLETION_KEYS: dict[str, float | int | None] = {
    "completion_ids": None,
    "completion_mask": 0,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "importance_sampling_ratio": 0.0,
    "tool_mask": 1,  # TRL pads tool_mask with 1: padding is excluded by completion_mask
}
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
    """Concatenate row-selected batches, re-padding prompt keys on the left and completion keys on the right."""
    if not batches:
        raise ValueError("nothing to concatenate")
    keys = list(batches[0])
    for batch in batches[1:]:
        if list(batch) != keys:
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
class _Round:
    """What one generation round left behind, beyond TRL's output dict (local rows unless noted)."""

    rewards_per_func: torch.Tensor  # gathered over processes: (N_global, n_funcs)
    completion_ids: list[list[int]]
    lengths: torch.Tensor  # model tokens, as TRL's completions/*_length count them (core.metrics.completion_lengths)
    truncated: torch.Tensor  # hit the length cap before EOS (TRL's is_truncated)


@dataclass
class _Assembled:
    """Per-row facts about an assembled update batch that TRL's output dict does not carry (local rows)."""

    rewards_per_func: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    completion_ids: list[list[int]]
    filled: torch.Tensor
    origin: list[tuple[int, int, int]]
    global_advantages: torch.Tensor


@dataclass
class _Part:
    """Whole groups selected from one round, ready to be concatenated into the update batch."""

    batch: dict[str, Any]
    rewards_per_func: torch.Tensor  # (rows, n_funcs)
    lengths: torch.Tensor  # model tokens (TRL's length metrics)
    truncated: torch.Tensor
    completion_ids: list[list[int]]
    origin: list[tuple[int, int, int]]  # (round, round's rows per process, local row) for the completions table
    filled: bool = False


class AssemblyMixin:
    """The batch-assembly half of `DAPOTrainer`'s dynamic sampling: whole groups of each round, the fill groups when
    the budget runs out, and the one update batch built from them (advantages, loss mask, denominator, metrics)."""

    def _select_groups(self, output, record: _Round, local_rewards, group_ids, round_index, local_count) -> _Part:
        G = self.num_generations
        rows = (group_ids.unsqueeze(1) * G + torch.arange(G)).flatten()
        row_list = rows.tolist()
        completion_ids = [record.completion_ids[i] for i in row_list]
        return _Part(
            batch=select_rows(output, rows),
            rewards_per_func=local_rewards.index_select(0, rows.to(local_rewards.device)),
            lengths=record.lengths.index_select(0, rows),
            truncated=record.truncated.index_select(0, rows),
            completion_ids=completion_ids,
            origin=[(round_index, local_count, i) for i in row_list],
        )

    def _collect_fill_candidates(
        self, candidates, output, record, local_rewards, filter_rewards, informative, round_index, local_count, room
    ) -> None:
        """Keep the best uninformative groups seen so far, never more than the batch could still need (``room``).

        ``room`` only shrinks as informative groups are kept, so groups pruned now can never be needed later.
        """
        G = self.num_generations
        spread, _ = group_reward_spread(filter_rewards, G)
        fresh = [
            ((-spread[group_id].item(), round_index, order), group_id)
            for order, group_id in enumerate(fill_priority(filter_rewards, G).tolist())
            if not informative[group_id]
        ]
        ranked = sorted(candidates + fresh, key=lambda candidate: candidate[0])[: max(room, 0)]
        candidates[:] = [
            (
                key,
                item
                if isinstance(item, _Part)
                else self._filler(output, record, local_rewards, item, round_index, local_count),
            )
            for key, item in ranked
        ]

    def _filler(self, output, record, local_rewards, group_id: int, round_index: int, local_count: int) -> _Part:
        part = self._select_groups(output, record, local_rewards, torch.tensor([group_id]), round_index, local_count)
        part.filled = True
        return part

    def _assemble(self, parts: list[_Part]) -> tuple[dict[str, Any], _Assembled]:
        """Concatenate the selected groups; recompute advantages, the loss mask of filled groups and the denominator."""
        batch = concat_rows([part.batch for part in parts], pad_token_id=self._tokenizer.pad_token_id)
        rewards_per_func = torch.cat([part.rewards_per_func for part in parts])
        filled = torch.cat([torch.full((len(part.origin),), part.filled) for part in parts])
        device = batch["completion_mask"].device

        # Filled groups are masked out of the loss: zero tool_mask rows (tool_mask only enters the loss mask).
        if filled.any():
            if "tool_mask" not in batch:
                batch["tool_mask"] = torch.ones_like(batch["completion_mask"])
            batch["tool_mask"][filled.to(device)] = 0

        # Advantages on the final batch: batch-level statistics (scale_rewards="batch", normalize_then_sum) change
        # when groups are dropped. Filled rows are left out of every statistic (NaN) and get advantage 0.
        scored = rewards_per_func.clone()
        scored[filled.to(scored.device)] = torch.nan
        global_rewards = self.accelerator.gather(scored.to(device))
        advantages = self._advantages(global_rewards)
        batch["advantages"] = self._local_rows(advantages, len(filled)).to(device)

        # The dapo/cispo/vespo losses divide by the global number of loss tokens of this batch.
        loss_mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        # The grpo/sapo/luspo/dr_grpo losses count rows, masked or not: the factor that takes the masked rows out.
        masked_rows = int(self.accelerator.gather(filled.sum().reshape(1).to(device)).sum())
        scale = masked_rows_loss_scale(
            self.args.loss_type, rows=len(filled) * self.accelerator.num_processes, masked_rows=masked_rows
        )
        if scale != 1.0:
            batch[LOSS_SCALE_KEY] = torch.tensor(scale, device=device)

        facts = _Assembled(
            rewards_per_func=rewards_per_func,
            lengths=torch.cat([part.lengths for part in parts]),
            truncated=torch.cat([part.truncated for part in parts]),
            completion_ids=[ids for part in parts for ids in part.completion_ids],
            filled=filled,
            origin=[origin for part in parts for origin in part.origin],
            global_advantages=advantages,
        )
        return batch, facts

    def _replace_trl_metrics(self, metric_marks: dict[str, int], facts: _Assembled) -> None:
        """Replace TRL's per-call batch metrics of this step's rounds (logged since ``metric_marks``) with one value
        computed on the update batch."""
        # TRL's per-call metrics now describe the update batch instead of an average over discarded attempts.
        device, gather = self.accelerator.device, self.accelerator.gather
        trl_metrics = trl_batch_metrics(
            lengths=gather(facts.lengths.to(device)).cpu(),
            truncated=gather(facts.truncated.to(device)).cpu(),
            rewards_per_func=gather(facts.rewards_per_func.to(device)).cpu(),
            weights=self.reward_weights,
            reward_func_names=self.reward_func_names,
            num_generations=self.num_generations,
            scale_rewards=self.args.scale_rewards,
        )
        train_metrics = self._metrics["train"]
        for key, value in trl_metrics.items():
            if key in RECOMPUTED_KEYS or key.startswith("rewards/"):
                del train_metrics[key][metric_marks.get(key, 0) :]
                train_metrics[key].append(value)

    def _rebuild_completion_logs(self, round_logs: dict[int, dict], facts: _Assembled) -> None:
        """Completions table rows for the update batch, in global row order, instead of the last rounds' rows."""
        origins = gather_object([(self.accelerator.process_index, *origin) for origin in facts.origin])
        rewards = self.accelerator.gather(facts.rewards_per_func.to(self.accelerator.device)).cpu()
        logs = self._logs
        for value in logs.values():
            value.clear()
        for row, (rank, round_index, local_count, local_row) in enumerate(origins):
            source, index = round_logs[round_index], rank * local_count + local_row
            logs["prompt"].append(source["prompt"][index])
            logs["completion"].append(source["completion"][index])
            for column, values in source["extra"].items():
                logs["extra"][column].append(values[index] if index < len(values) else None)
            for func_index, name in enumerate(self.reward_func_names):
                logs["rewards"][name].append(rewards[row, func_index].item())
        logs["advantages"].extend(facts.global_advantages.tolist())
