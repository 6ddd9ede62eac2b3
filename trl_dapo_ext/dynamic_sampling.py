"""Dynamic sampling with refill: the rounds, the refill stream, batch assembly and metrics of `DAPOTrainer`.

A mixin, kept apart so that `trainer.py` reads as the short orchestration it is. For each optimizer batch,
:meth:`DynamicSamplingMixin._dynamic_sampling_batch` runs TRL's own ``_generate_and_score_completions`` once per
round (so every generation backend keeps working), keeps the groups whose task reward varies (DAPO Eq. 11), asks the
refill planner how many new prompts the next round needs, and assembles exactly one batch of informative groups, with
advantages, ``num_items_in_batch`` and TRL's batch metrics recomputed on what is actually trained on. The math lives
in the pure modules (`filtering`, `planner`, `history`, `refill`, `batch`, `batch_metrics`); this file is the glue.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
import warnings
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from accelerate.utils import gather_object
from transformers.trainer_callback import ProgressCallback

from .advantages import combine_rewards
from .batch import concat_rows, select_rows
from .batch_metrics import RECOMPUTED_KEYS, trl_batch_metrics
from .filtering import (
    fill_priority,
    group_outcomes,
    group_reward_spread,
    group_upper_counts,
    informative_groups,
    plan_refill_groups,
)
from .history import GroupOutcome, PromptHistory
from .planner import POOLED, RefillPlanner
from .refill import RefillSampler

logger = logging.getLogger(__name__)

REFILL_STATE_FILE = "dapo_refill_state.json"
# With dynamic sampling, each training row carries its dataset index in this column, so that the prompt history also
# learns from the dataloader's own prompts; it is removed before TRL (and the reward functions) see the rows.
PROMPT_INDEX_COLUMN = "dapo_ext_prompt_index"


def refill_state_file(process_index: int, world_size: int) -> str:
    """Name of a process's refill-state file in a checkpoint, following the RNG state's (``rng_state_{i}.pth``).

    Example:
        >>> refill_state_file(0, 1), refill_state_file(3, 4)
        ('dapo_refill_state.json', 'dapo_refill_state_3.json')
    """
    stem, extension = os.path.splitext(REFILL_STATE_FILE)
    return REFILL_STATE_FILE if world_size <= 1 else f"{stem}_{process_index}{extension}"


def _with_prompt_index(dataset: Any) -> Any:
    """A ``datasets.Dataset`` with :data:`PROMPT_INDEX_COLUMN` added; any other dataset unchanged (no index)."""
    if not isinstance(dataset, datasets.Dataset):
        return dataset
    if PROMPT_INDEX_COLUMN in dataset.column_names:
        raise ValueError(f"train_dataset already has a column {PROMPT_INDEX_COLUMN!r}; dynamic sampling needs it")
    return dataset.add_column(PROMPT_INDEX_COLUMN, list(range(len(dataset))))


class DynamicSamplingExhausted(RuntimeError):
    """The round budget ran out before the batch held enough informative groups (``on_exhausted="error"``)."""


@dataclass
class _Round:
    """What one generation round left behind, beyond TRL's output dict (local rows unless noted)."""

    rewards_per_func: torch.Tensor  # gathered over processes: (N_global, n_funcs)
    completion_ids: list[list[int]]


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


class DynamicSamplingMixin:
    """The dynamic-sampling half of `DAPOTrainer`: rounds, refill, batch assembly, metrics and checkpoint state.

    Mixed in before `trl.GRPOTrainer`, so ``super()._generate_and_score_completions`` here is TRL's, called once per
    round. The trainer calls :meth:`_setup_dynamic_sampling` at construction and :meth:`_dynamic_sampling_batch`
    instead of one TRL call when ``dynamic_sampling=True`` and the model is training.
    """

    def _setup_dynamic_sampling(self) -> None:
        args = self.args
        dataset = self.train_dataset
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError(
                "dynamic_sampling draws refill prompts from train_dataset and needs a map-style dataset (with len "
                "and indexing); an IterableDataset or no dataset is not supported. Convert it with "
                "datasets.Dataset.from_generator / from_list, or set dynamic_sampling=False."
            )
        groups_per_batch = (
            args.per_device_train_batch_size * args.steps_per_generation // self.num_generations
        ) * self.accelerator.num_processes
        if len(dataset) < groups_per_batch:
            raise ValueError(
                f"train_dataset has {len(dataset)} prompts, but every optimizer batch needs {groups_per_batch} prompt "
                "groups: dynamic sampling could never fill a batch with distinct prompts. Use a larger dataset or a "
                "smaller per_device_train_batch_size * steps_per_generation / num_generations."
            )
        self.filter_reward_indices = self._resolve_filter_reward_funcs(args.dynamic_sampling_reward_funcs)
        seed = args.data_seed if args.data_seed is not None else args.seed
        self.refill_sampler = RefillSampler(len(dataset), seed=seed, shuffle=args.shuffle_dataset)
        # Round sizes: the adaptive planner (oversample=None) or a fixed first round (a number).
        self.refill_planner = None
        if args.dynamic_sampling_oversample is None:
            self.refill_planner = RefillPlanner(
                max_oversample=args.dynamic_sampling_max_oversample,
                max_groups_per_step=args.dynamic_sampling_max_groups_per_step,
                confidence=args.dynamic_sampling_confidence,
                decay=args.dynamic_sampling_retention_decay,
                num_processes=self.accelerator.num_processes,
                generations=self.num_generations,
                round_latency=args.dynamic_sampling_round_latency,
                measure_latency=args.dynamic_sampling_measure_latency,
            )
        self._step_seconds = 0.0  # measured generation + scoring time of this step's rounds (slowest process)
        # Every prompt's last outcomes: the planner's strata, and (when a skip window is set) the skip rule.
        self.skips_prompts = args.dynamic_sampling_skip_window > 0
        self.prompt_history = PromptHistory(
            window=max(args.dynamic_sampling_skip_window, 1),
            floor=args.dynamic_sampling_skip_floor,
            seed=seed,
            generations=self.num_generations,
        )
        if args.dynamic_sampling_history_from is not None:
            self._seed_prompt_history(args.dynamic_sampling_history_from, len(dataset))
        self._round_indices: list[int] = []  # dataset index of each of this process's groups in the current round
        self._skip_counts = [0, 0, 0]  # this step: skipped, readmitted, forced refill prompts
        self._reward_range = [math.inf, -math.inf]  # filter-reward extremes seen so far (all_max / all_min split)
        self._warned_fill = False

    def _seed_prompt_history(self, path: str, dataset_size: int) -> None:
        """Record a `trl-dapo profile` table in the prompt history (every process reads the same file)."""
        from .preflight.difficulty import read_table, seed_history

        table = read_table(path)
        outside = [row.index for row in table if not 0 <= row.index < dataset_size]
        if outside:
            raise ValueError(
                f"dynamic_sampling_history_from={path!r} has dataset indices up to {max(outside)}, but train_dataset "
                f"has {dataset_size} rows: profile this same dataset (same rows, same order)."
            )
        seed_history(self.prompt_history, table)

    def _resolve_filter_reward_funcs(self, selection: list[str] | None) -> list[int]:
        names = self.reward_func_names
        if selection is None:
            return list(self.task_reward_indices)
        indices = []
        for item in selection:
            text = str(item)
            if text.isdigit() and int(text) < len(names):
                index = int(text)
            elif text in names:
                index = names.index(text)
            else:
                raise ValueError(
                    f"dynamic_sampling_reward_funcs names {item!r}, which is not a reward function here; choose "
                    f"from {[names[i] for i in self.task_reward_indices]} (or their indices)."
                )
            if index not in self.task_reward_indices:
                raise ValueError(
                    f"dynamic_sampling_reward_funcs selects {names[index]!r}, the overlong length penalty: groups "
                    "are filtered on the task reward (DAPO filters on accuracy), never on length shaping."
                )
            indices.append(index)
        return sorted(set(indices))

    def _refill_rows(self, groups_per_process: int, round_index: int) -> list[dict[str, Any]]:
        """Fresh dataset rows for ``groups_per_process`` new prompts, each repeated G times (as TRL's sampler does).

        With prompt-history skipping, prompts known to be zero-variance are mostly passed over (the same decision on
        every process: the coins are keyed by step, round and position).
        """
        if groups_per_process <= 0:
            return []
        rank = self.accelerator.process_index
        indices = self._refill_stream(groups_per_process * self.accelerator.num_processes, round_index)
        indices = indices[rank * groups_per_process : (rank + 1) * groups_per_process]
        self._round_indices += indices
        rows = []
        for index in indices:
            row = dict(self.train_dataset[index])
            row.pop(PROMPT_INDEX_COLUMN, None)
            rows.extend(dict(row) for _ in range(self.num_generations))
        return rows

    def _refill_stream(self, count: int, round_index: int, preview: bool = False) -> list[int]:
        """The next ``count`` global refill indices (skipping known zero-variance prompts when enabled).

        ``preview=True`` returns what a real draw would return without advancing the stream or the counters: the
        skip coins are keyed by (step, round, position, index), so the preview is the real draw's prefix.
        """
        if not self.skips_prompts:
            return self.refill_sampler.peek(count) if preview else self.refill_sampler.take(count)
        stream = copy.copy(self.refill_sampler) if preview else self.refill_sampler
        admission = self.prompt_history.admit(
            stream.take, count, step=self.state.global_step, round_index=round_index, commit=not preview
        )
        if not preview:
            self._skip_counts = [
                total + new
                for total, new in zip(self._skip_counts, (admission.skipped, admission.readmitted, admission.forced))
            ]
        return admission.admitted

    def _stratum(self, index: int) -> str:
        return self.prompt_history.stratum(index) if index >= 0 else POOLED  # -1: a row without a dataset index

    def _candidate_strata(self, round_index: int):
        """For the planner: the strata of the refill prompts a round would draw (a preview of the shared stream)."""
        return lambda count: [self._stratum(i) for i in self._refill_stream(count, round_index, preview=True)]

    def _first_refill(self, target: int, max_rounds: int) -> int:
        """Refill groups (per process) that round 1 adds to the batch's own ``target``: the fixed factor, or the
        planner's plan from the strata of every process's own prompts and a preview of the refill stream."""
        if self.refill_planner is None:
            return math.ceil(target * self.args.dynamic_sampling_oversample) - target
        own = self.accelerator.gather(torch.tensor(self._round_indices, device=self.accelerator.device)).cpu()
        own_strata = [[self._stratum(i) for i in row] for row in own.view(-1, target).tolist()]
        return self.refill_planner.first_round(
            target, rounds_left=max_rounds, own=own_strata, candidates=self._candidate_strata(round_index=1)
        )

    def _dynamic_sampling_batch(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor | Any]:
        args, G = self.args, self.num_generations
        num_processes = self.accelerator.num_processes
        target = len(inputs) // G  # groups this process must deliver
        max_rounds = args.dynamic_sampling_max_rounds
        planner = self.refill_planner
        # The batch's own prompts: their dataset indices (taken out of the rows) say what they were last time.
        self._round_indices = [int(row.pop(PROMPT_INDEX_COLUMN, -1)) for row in inputs][::G]
        self._skip_counts = [0, 0, 0]
        self._step_seconds = 0.0
        first_refill = self._first_refill(target, max_rounds)
        metric_marks = {key: len(values) for key, values in self._metrics["train"].items()}
        original_logs, round_logs = self._logs, {}

        kept: list[_Part] = []
        attempted_rewards: list[torch.Tensor] = []  # gathered reward matrix of every round (diagnostics)
        generated_ids: list[list[list[int]]] = []
        fill_candidates: list[tuple[tuple, _Part]] = []  # (priority key, one uninformative group)
        totals = torch.zeros(6, dtype=torch.long)  # global: attempted, informative, surplus, all_max, all_min, other
        unscored = _Unscored.empty(len(self.reward_func_names))  # NaN/None rewards (global), to say why it stopped
        rows = inputs + self._refill_rows(first_refill, round_index=1)
        for round_index in range(1, max_rounds + 1):
            if self.log_completions:
                self._logs = round_logs[round_index] = _empty_like(original_logs)
            started = time.perf_counter()
            output, record = self._scored_round(rows)
            self._time_round(len(rows), time.perf_counter() - started)
            unscored.add(record.rewards_per_func, self.filter_reward_indices)
            local_count = len(rows)
            if args.diagnostics:
                attempted_rewards.append(record.rewards_per_func)
                generated_ids.append(record.completion_ids)
            local_rewards = self._local_rows(record.rewards_per_func, local_count)

            # Which groups vary in the task reward (the overlong penalty never counts).
            filter_columns = local_rewards[:, self.filter_reward_indices]
            filter_rewards = combine_rewards(filter_columns, self.reward_weights[self.filter_reward_indices])
            informative = informative_groups(filter_rewards, G, args.dynamic_sampling_std_tolerance)
            self._update_reward_range(record.rewards_per_func)
            # One outcome per group: the zero-variance split below and the prompt history both read it.
            outcomes = group_outcomes(filter_rewards, G, informative, *self._reward_range)

            already = sum(len(part.origin) for part in kept) // G
            informative_ids = informative.nonzero().flatten()
            take = informative_ids[: max(target - already, 0)]
            if len(take):
                kept.append(self._select_groups(output, record, local_rewards, take, round_index, local_count))
            if args.dynamic_sampling_on_exhausted == "fill":
                self._collect_fill_candidates(
                    fill_candidates,
                    output,
                    record,
                    local_rewards,
                    filter_rewards,
                    informative,
                    round_index,
                    local_count,
                    room=target - already - len(take),
                )
            round_counts = [
                len(informative),
                len(informative_ids),
                len(informative_ids) - len(take),
                outcomes.count(GroupOutcome.ALL_MAX),
                outcomes.count(GroupOutcome.ALL_MIN),
                outcomes.count(GroupOutcome.OTHER),
            ]
            counts = [already + len(take), *round_counts]
            gathered = self.accelerator.gather(torch.tensor(counts, device=self.accelerator.device))
            gathered = gathered.view(num_processes, -1).cpu()
            totals += gathered[:, 1:].sum(dim=0)
            kept_per_process = gathered[:, 0]
            self._observe_round(outcomes, *group_upper_counts(filter_rewards, G, *self._reward_range))
            self._show_progress(round_index, max_rounds, int(kept_per_process.sum()), target * num_processes)
            if int(kept_per_process.min()) >= target or round_index == max_rounds:
                break
            # The same plan on every process (it only reads gathered counts), so every process generates alike.
            missing_groups = int((target - kept_per_process).max())
            if planner is not None:
                next_groups = planner.next_round(
                    (target - kept_per_process).clamp(min=0).tolist(),
                    rounds_left=max_rounds - round_index,
                    candidates=self._candidate_strata(round_index=round_index + 1),
                )
                if next_groups == 0:  # the per-step budget is spent, or no round could fill the batch
                    break
            else:
                next_groups = plan_refill_groups(
                    missing_groups=missing_groups,
                    attempted_groups=int(totals[0]),
                    informative_groups_seen=int(totals[1]),
                    max_groups=target + first_refill,  # later rounds never larger than the first
                )
            rows = self._refill_rows(next_groups, round_index=round_index + 1)
        if planner is not None:
            planner.end_step()

        self._logs = original_logs
        retained_per_process = kept_per_process.clamp(max=target)
        missing = target - sum(len(part.origin) for part in kept) // G
        if int(retained_per_process.min()) < target:
            if args.dynamic_sampling_on_exhausted == "error":
                raise DynamicSamplingExhausted(
                    self._exhausted_message(round_index, totals, retained_per_process, target, unscored)
                )
            self._warn_fill_once(round_index, retained_per_process, target, unscored)
        fillers = [part for _, part in fill_candidates[: max(missing, 0)]]
        if len(fillers) < missing:  # cannot happen: every attempted group is either kept or a candidate
            raise RuntimeError(f"dynamic sampling lost track of groups: {missing} missing, {len(fillers)} fillers")

        batch, facts = self._assemble(kept + fillers)
        self._log_dynamic_sampling(round_index, totals, retained_per_process, len(fillers), metric_marks, facts)
        if args.diagnostics:
            self._log_diagnostics(
                attempted=attempted_rewards,
                update_rewards=facts.rewards_per_func,
                lengths=facts.lengths,
                truncated=facts.truncated,
                batch=batch,
                completion_ids=facts.completion_ids,
                generated_completion_ids=generated_ids,
            )
        if self.log_completions:
            self._rebuild_completion_logs(round_logs, facts)
        return batch

    def _time_round(self, completions: int, seconds: float) -> None:
        """One round's generation and scoring time, the slowest process's (the round ends when it does), for the
        planner's cost model and the step's ``generation_seconds``. Every process gets the same number."""
        device = self.accelerator.device
        seconds = float(self.accelerator.gather(torch.tensor([seconds], dtype=torch.float64, device=device)).max())
        self._step_seconds += seconds
        if self.refill_planner is not None:
            self.refill_planner.cost_model.observe(completions, seconds)

    def _observe_round(self, outcomes: list[GroupOutcome], upper: list[int], scorable: list[int]) -> None:
        """Every process's groups of this round: counts per stratum for the planner, then the prompt history.

        The strata are read before the history records this round, so each group counts in the stratum the
        planner saw when it sized the round. Every process gathers the same lists and so keeps the same state.
        """
        local = torch.tensor(
            [self._round_indices, [int(o) for o in outcomes], upper, scorable], device=self.accelerator.device
        )
        self._round_indices = []
        gathered = self.accelerator.gather(local.unsqueeze(0)).cpu()  # (processes, 4, groups)
        indices, results, uppers, scorables = (gathered[:, row].flatten().tolist() for row in range(4))
        if self.refill_planner is not None:
            self.refill_planner.observe_groups(
                [self._stratum(index) for index in indices],
                [outcome == GroupOutcome.INFORMATIVE for outcome in results],
            )
        known = [position for position, index in enumerate(indices) if index >= 0]
        self.prompt_history.record(
            [indices[i] for i in known],
            [results[i] for i in known],
            upper=[uppers[i] for i in known],
            scorable=[scorables[i] for i in known],
        )

    def _select_groups(self, output, record: _Round, local_rewards, group_ids, round_index, local_count) -> _Part:
        G = self.num_generations
        rows = (group_ids.unsqueeze(1) * G + torch.arange(G)).flatten()
        row_list = rows.tolist()
        completion_ids = [record.completion_ids[i] for i in row_list]
        tool_mask = output.get("tool_mask")
        lengths, truncated = self._row_lengths(
            completion_ids, tool_mask.index_select(0, rows.to(tool_mask.device)) if tool_mask is not None else None
        )
        return _Part(
            batch=select_rows(output, rows),
            rewards_per_func=local_rewards.index_select(0, rows.to(local_rewards.device)),
            lengths=lengths,
            truncated=truncated,
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

    def _update_reward_range(self, rewards_per_func: torch.Tensor) -> None:
        filter_rewards = combine_rewards(
            rewards_per_func[:, self.filter_reward_indices], self.reward_weights[self.filter_reward_indices]
        )
        finite = filter_rewards[~torch.isnan(filter_rewards)]
        if finite.numel():
            self._reward_range[0] = min(self._reward_range[0], finite.min().item())
            self._reward_range[1] = max(self._reward_range[1], finite.max().item())

    def _log_dynamic_sampling(self, rounds, totals, retained_per_process, filled, metric_marks, facts) -> None:
        attempted, informative, surplus, all_max, all_min, other = (int(v) for v in totals)
        retained = int(retained_per_process.sum())
        device = self.accelerator.device
        filled_global = int(self.accelerator.gather(torch.tensor([filled], device=device)).sum())
        metrics = {
            "dynamic_sampling/rounds": rounds,
            "dynamic_sampling/attempted_groups": attempted,
            "dynamic_sampling/retained_groups": retained,
            "dynamic_sampling/discarded_surplus_groups": surplus,
            "dynamic_sampling/zero_variance_groups": all_max + all_min + other,
            "dynamic_sampling/filled_groups": filled_global,
            "dynamic_sampling/retention_rate": retained / attempted if attempted else 0.0,
            "dynamic_sampling/generated_completions": attempted * self.num_generations,
            # The zero-variance split, every bucket: all_max + all_min + other = zero_variance_groups.
            "dynamic_sampling/all_max_groups": all_max,
            "dynamic_sampling/all_min_groups": all_min,
            "dynamic_sampling/other_zero_variance_groups": other,
        }
        metrics["dynamic_sampling/generation_seconds"] = self._step_seconds
        if self.refill_planner is not None:
            planner = self.refill_planner
            metrics["dynamic_sampling/expected_retention"] = planner.expected_retention()
            # Costs in completion-equivalents (a round costs round_latency + its completions): what the plan
            # expected at round 1, and what the rounds cost.
            metrics["dynamic_sampling/realised_cost"] = planner.last_step["realised_cost"]
            metrics["dynamic_sampling/round_latency"] = planner.last_step["latency"]
            metrics["dynamic_sampling/measured_round_latency"] = planner.cost_model.latency()
            metrics["dynamic_sampling/seconds_per_completion"] = planner.cost_model.seconds_per_completion()
            if planner.confidence is None:
                metrics["dynamic_sampling/expected_cost"] = planner.last_step["expected_cost"]
                metrics["dynamic_sampling/planned_fill_chance"] = planner.last_step["fill_chance"]
        if self.skips_prompts:
            skipped, readmitted, forced = self._skip_counts
            metrics.update(
                {
                    "dynamic_sampling/skipped_prompts": skipped,
                    "dynamic_sampling/readmitted_prompts": readmitted,
                    "dynamic_sampling/forced_prompts": forced,
                }
            )
        # TRL's per-call metrics now describe the update batch instead of an average over discarded attempts.
        gather = self.accelerator.gather
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
        for key, value in metrics.items():
            train_metrics[key].append(float(value))

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

    def _show_progress(self, round_index: int, max_rounds: int, retained: int, target: int) -> None:
        text = f"round {round_index}/{max_rounds}, {retained}/{target} groups retained"
        logger.debug("dynamic sampling: %s", text)
        for callback in self.callback_handler.callbacks:
            bar = getattr(callback, "training_bar", None) if isinstance(callback, ProgressCallback) else None
            if bar is not None:
                bar.set_postfix_str(text, refresh=True)

    def _exhausted_message(
        self, rounds: int, totals: torch.Tensor, retained_per_process, target: int, unscored: _Unscored
    ) -> str:
        attempted, informative = int(totals[0]), int(totals[1])
        where = f"dynamic sampling spent its budget of {rounds} generation rounds at step {self.state.global_step + 1}"
        if unscored.scorable == 0:
            return (
                f"{where}: 0 scorable completions, your reward returned NaN/None for all {unscored.rows} "
                f"({unscored.describe(self.reward_func_names)}), so no group can be informative. A reward returns "
                "None for a completion it cannot score: check that the dataset column it reads holds what it expects "
                "(see the warnings it printed)."
            )
        return (
            f"{where}: {attempted} prompt groups attempted, {informative} informative, retained per process "
            f"{retained_per_process.tolist()} of {target} needed{unscored.note(self.reward_func_names)}. Raise "
            "dynamic_sampling_max_rounds (or dynamic_sampling_max_groups_per_step), use prompts of mixed "
            "difficulty, or set dynamic_sampling_on_exhausted='fill' to train on a partly filled batch."
        )

    def _warn_fill_once(self, rounds: int, retained_per_process, target: int, unscored: _Unscored) -> None:
        if self._warned_fill:
            return
        self._warned_fill = True
        cause = (
            f" Every reward was NaN/None ({unscored.describe(self.reward_func_names)}): check the reward function "
            "and the dataset column it reads."
            if unscored.scorable == 0
            else ""
        )
        warnings.warn(
            f"dynamic sampling: after {rounds} rounds only {retained_per_process.tolist()} of {target} informative "
            "groups per process were found; the batch is completed with uninformative groups masked out of the loss "
            f"(counted in dynamic_sampling/filled_groups).{cause} Warned once per run.",
            stacklevel=2,
        )

    def dynamic_sampling_state(self) -> dict[str, Any]:
        """Everything that steers refill (JSON-ready): the refill stream's position, the planner's estimates, the
        reward range seen so far (it splits the zero-variance groups and the history's tallies) and the history."""
        return {
            "refill": self.refill_sampler.state_dict(),
            "planner": self.refill_planner.state_dict() if self.refill_planner is not None else None,
            "history": self.prompt_history.state_dict() if self.prompt_history is not None else None,
            "reward_range": list(self._reward_range),
        }

    def load_dynamic_sampling_state(self, state: dict[str, Any]) -> None:
        self.refill_sampler.load_state_dict(state["refill"])
        for name, component in (("planner", self.refill_planner), ("history", self.prompt_history)):
            if component is not None and state.get(name) is not None:
                component.load_state_dict(state[name])
        if state.get("reward_range") is not None:
            self._reward_range = [float(value) for value in state["reward_range"]]

    def save_dynamic_sampling_state(self, folder: str, process_index: int, world_size: int) -> str:
        """Write this process's refill state into a checkpoint ``folder``; return the file's path.

        Every process writes its own file (the states agree: each is built from gathered values), so every node
        of a run finds one beside its own RNG state, whether or not the checkpoint folder is shared. Written to a
        temporary name first, so an interrupted write never leaves a truncated state behind; errors propagate.
        """
        path = os.path.join(folder, refill_state_file(process_index, world_size))
        partial = f"{path}.partial"
        try:
            with open(partial, "w") as handle:
                json.dump(self.dynamic_sampling_state(), handle)
            os.replace(partial, path)
        except BaseException:
            if os.path.exists(partial):
                os.remove(partial)
            raise
        return path

    def load_dynamic_sampling_state_file(self, path: str) -> None:
        with open(path) as handle:
            self.load_dynamic_sampling_state(json.load(handle))


@dataclass
class _Unscored:
    """NaN/None rewards of one optimizer batch's rounds (gathered rows): per reward function, and for the filter."""

    per_func: torch.Tensor  # (n_funcs,) rows whose reward is NaN
    rows: int = 0
    scorable: int = 0  # rows whose filter reward is not NaN

    @classmethod
    def empty(cls, num_funcs: int) -> _Unscored:
        return cls(per_func=torch.zeros(num_funcs, dtype=torch.long))

    def add(self, rewards_per_func: torch.Tensor, filter_indices: list[int]) -> None:
        nan = torch.isnan(rewards_per_func).cpu()
        self.per_func += nan.sum(dim=0)
        self.rows += nan.shape[0]
        # A row counts for the filter when any filter reward scored it (combine_rewards ignores NaN terms).
        self.scorable += int((~nan[:, filter_indices]).any(dim=1).sum())

    def describe(self, names: list[str]) -> str:
        """``math_reward: 128 of 128 NaN/None, ...`` for the functions that returned any."""
        counts = [(name, int(count)) for name, count in zip(names, self.per_func.tolist()) if count]
        return ", ".join(f"{name}: {count} of {self.rows} NaN/None" for name, count in counts) or "none NaN"

    def note(self, names: list[str]) -> str:
        return f" (NaN/None rewards: {self.describe(names)})" if int(self.per_func.sum()) else ""


def _empty_like(logs: dict[str, Any]) -> dict[str, Any]:
    """Unbounded containers shaped like TRL's `_logs`, so a large round loses no rows before selection."""
    return {key: defaultdict(deque) if isinstance(value, defaultdict) else deque() for key, value in logs.items()}
