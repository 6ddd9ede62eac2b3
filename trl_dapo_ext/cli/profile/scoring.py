"""``trl-dapo profile``'s scoring: the reward functions on the samples, and each prompt's statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from trl_dapo_ext.preflight.difficulty import prompt_stats

from .arguments import ProfileError
from .sampling import tokenize_prompts


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def score(
    rewards: Sequence[Callable], rows: Sequence[dict], completions: Sequence[Any], ids: Sequence[list[int]]
) -> list[float | None]:
    """Summed rewards (weight 1 each, None ignored as TRL's nansum does), one call per reward function."""
    prompts = [row["prompt"] for row in rows]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key not in ("prompt", "completion")}
    totals: list[float | None] = [None] * len(completions)
    for reward in rewards:
        name = getattr(reward, "__name__", reward)
        try:
            values = reward(
                prompts=prompts,
                completions=list(completions),
                completion_ids=list(ids),
                trainer_state=None,
                log_extra=_noop,
                log_metric=_noop,
                **columns,
            )
        except Exception as error:  # noqa: BLE001 - the user's reward: one line (trl-dapo check-reward tests it)
            raise ProfileError(
                f"reward {name} raised: {type(error).__name__}: {error} (trl-dapo check-reward {name} tests it)"
            ) from error
        values = list(values)
        if len(values) != len(completions):
            raise ProfileError(f"reward {name} returned {len(values)} values for {len(completions)} completions")
        for i, value in enumerate(values):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            totals[i] = (totals[i] or 0.0) + float(value)
    return totals


def profile_dataset(dataset, rewards, generate, tokenizer, options, progress=None):
    """Per-prompt statistics of ``dataset`` (already prepared: a ``prompt`` column) and the mean prompt length."""
    k = options.samples or options.num_generations
    stats, prompt_lengths = [], []
    for start in range(0, len(dataset), options.batch_prompts):
        rows = [dataset[i] for i in range(start, min(start + options.batch_prompts, len(dataset)))]
        prompt_ids = tokenize_prompts(tokenizer, [row["prompt"] for row in rows])
        prompt_lengths += [len(ids) for ids in prompt_ids]
        samples = generate(prompt_ids, k)
        flat = [s for group in samples for s in group]
        texts = tokenizer.batch_decode([s.ids for s in flat], skip_special_tokens=True)
        chat = isinstance(rows[0]["prompt"], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
        repeated = [row for row in rows for _ in range(k)]
        totals = score(rewards, repeated, completions, [s.ids for s in flat])
        for j, group in enumerate(samples):
            stats.append(
                prompt_stats(
                    start + j,
                    totals[j * k : (j + 1) * k],
                    [len(s.ids) for s in group],
                    [s.truncated for s in group],
                    group_size=options.num_generations,
                    pass_threshold=options.pass_threshold,
                )
            )
        if progress is not None:
            progress(len(stats), len(dataset))
    return stats, sum(prompt_lengths) / max(len(prompt_lengths), 1)
