"""Row selection and concatenation for the batch dicts that `GRPOTrainer._generate_and_score_completions` returns.

Each generation round returns its own padded tensors (prompt widths and completion widths differ per round), so
rows kept from several rounds are re-padded to a common width: prompt-side keys on the left, completion-side keys
on the right, with the pad value TRL uses for each key. A key this module does not know raises instead of being
concatenated wrongly: new TRL keys must be classified here first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

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
            "add it to trl_dapo_ext/batch.py or set dynamic_sampling=False."
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
