"""The round loop of dynamic sampling: generate, score, keep informative groups, stop or ask for more.

For each optimizer batch, :meth:`DynamicSamplingMixin._dynamic_sampling_batch` runs TRL's own
``_generate_and_score_completions`` once per round (so every generation backend keeps working), keeps the groups
whose task reward varies (DAPO Eq. 11, :mod:`trl_dapo_ext.core.groups`), asks the refill planner (`planner`) how many
new prompts from the refill stream (`stream`, filtered by the prompt `history`) the next round needs, and hands the
kept groups to `assembly`, which builds exactly one batch of informative groups. Checkpoint state: `state`.
"""

from __future__ import annotations

import copy
import logging
import math
import time
import warnings
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import datasets
import torch
from transformers.trainer_callback import ProgressCallback

from ..core.advantages import combine_rewards
from ..core.groups import GroupOutcome, group_outcomes, group_upper_counts, informative_groups
from ..metric_names import N
from .assembly import AssemblyMixin, _Part
from .history import PromptHistory
from .planner import POOLED, RefillPlanner, fixed_first_refill, plan_refill_groups
from .state import StateMixin
from .stream import RefillSampler, local_share

logger = logging.getLogger(__name__)

# With dynamic sampling, each training row carries its dataset index in this column, so that the prompt history also
# learns from the dataloader's own prompts; it is removed before TRL (and the reward functions) see the rows.
PROMPT_INDEX_COLUMN = "dapo_ext_prompt_index"


def _with_prompt_index(dataset: Any) -> Any:
    """A ``datasets.Dataset`` with :data:`PROMPT_INDEX_COLUMN` added; any other dataset unchanged (no index)."""
    if not isinstance(dataset, datasets.Dataset):
        return dataset
    if PROMPT_INDEX_COLUMN in dataset.column_names:
        raise ValueError(f"train_dataset already has a column {PROMPT_INDEX_COLUMN!r}; dynamic sampling needs it")
    return dataset.add_column(PROMPT_INDEX_COLUMN, list(range(len(dataset))))


class DynamicSamplingExhausted(RuntimeError):
    """The round budget ran out before the batch held enough informative groups (``on_exhausted="error"``)."""


def no_contrast_cause(totals: GroupCounts, reward_range: list[float]) -> str:
    """With no informative group at all: whether the groups were all wrong or all right, and what usually causes it.

    >>> no_contrast_cause(GroupCounts(attempted=6, all_min=6), [0.0, 1.0])  # doctest: +ELLIPSIS
    'Every group was all wrong (6 of 6): usually a format or verifier mismatch ... '
    >>> no_contrast_cause(GroupCounts(attempted=6, other=6), [0.0, 0.0])  # doctest: +ELLIPSIS
    'Every completion got the same reward, 0: ...'
    """
    low, high = reward_range
    if low == high:  # one value seen: all wrong and all right cannot be told apart by the range, say both
        return (
            f"Every completion got the same reward, {low:g}: if that is a fail, every group was all wrong, usually a "
            "format or verifier mismatch (the completions never give the answer the way the reward reads it); if a "
            "pass, every group was all right (prompts too easy, or a reward that pays everything). trl-dapo "
            "check-reward REWARD --dataset DATA tests the reward on your golds. "
        )
    if totals.all_min == totals.attempted:
        return (
            f"Every group was all wrong ({totals.all_min} of {totals.attempted}): usually a format or verifier mismatch "
            "(the completions never give the answer the way the reward reads it, or the gold column is not what it "
            "expects); trl-dapo check-reward REWARD --dataset DATA tests the reward on your golds. "
        )
    if totals.all_max == totals.attempted:
        return (
            f"Every group was all right ({totals.all_max} of {totals.attempted}): the prompts are too easy, or the "
            "reward pays everything (trl-dapo check-reward REWARD --dataset DATA finds its false positives). "
        )
    return (
        f"Of {totals.attempted} groups, {totals.all_min} were all wrong, {totals.all_max} all right and "
        f"{totals.other} zero-variance otherwise; trl-dapo check-reward REWARD --dataset DATA tests the reward. "
    )


class GroupCounts(NamedTuple):
    """Prompt groups of a step's rounds (global), by what they turned out to be."""

    attempted: int = 0
    informative: int = 0
    surplus: int = 0  # informative, but beyond what the batch still needed (discarded)
    all_max: int = 0
    all_min: int = 0
    other: int = 0  # zero-variance elsewhere (see core.groups.GroupOutcome.OTHER)

    @property
    def zero_variance(self) -> int:
        return self.all_max + self.all_min + self.other


class SkipCounts(NamedTuple):
    """Refill prompts of a step that prompt-history skipping passed over, readmitted (exploration floor), forced."""

    skipped: int = 0
    readmitted: int = 0
    forced: int = 0


_Counts = TypeVar("_Counts", GroupCounts, SkipCounts)


def _added(counts: _Counts, more: _Counts) -> _Counts:
    """Two count records of the same kind, added field by field."""
    return type(counts)(*(a + b for a, b in zip(counts, more)))


@dataclass
class _Unscored:
    """NaN/None rewards of one optimizer batch's rounds (gathered rows): per reward function, and for the filter."""

    per_func: torch.Tensor  # (n_funcs,) rows whose reward is NaN
    rows: int = 0
    scorable: int = 0  # rows whose filter reward is not NaN

    @classmethod
    def empty(cls, num_funcs: int) -> _Unscored:
        return cls(per_func=torch.zeros(num_funcs, dtype=torch.long))

    def add(self, rewards_per_func: torch.Tensor, filter_indices: list[int], task_indices: list[int]) -> None:
        nan = torch.isnan(rewards_per_func).cpu()
        # Task rewards only: the overlong penalty is NaN exactly where they all are, and is not the user's to fix.
        self.per_func[task_indices] += nan[:, task_indices].sum(dim=0)
        self.rows += nan.shape[0]
        # A row counts for the filter when any filter reward scored it (combine_rewards ignores NaN terms).
        self.scorable += int((~nan[:, filter_indices]).any(dim=1).sum())

    def describe(self, names: list[str]) -> str:
        """``math_reward: 128 of 128 NaN/None, ...`` for the functions that returned any."""
        counts = [(name, int(count)) for name, count in zip(names, self.per_func.tolist()) if count]
        return ", ".join(f"{name}: {count} of {self.rows} NaN/None" for name, count in counts) or "none NaN"

    def note(self, names: list[str]) -> str:
        return f" (NaN/None rewards: {self.describe(names)})" if int(self.per_func.sum()) else ""


@dataclass
class _Step:
    """What one optimizer batch's rounds have gathered so far (this process's groups, global counts)."""

    target: int  # informative groups this process must deliver
    first_refill: int  # refill groups round 1 adds to the batch's own
    metric_marks: dict[str, int]  # lengths of the logged metric lists before the step (TRL's are replaced)
    original_logs: dict[str, Any]  # TRL's completions-table buffers, restored after the rounds
    unscored: _Unscored
    rounds: int = 0
    totals: GroupCounts = GroupCounts()
    kept_per_process: torch.Tensor | None = None  # informative groups each process holds
    kept: list[_Part] = field(default_factory=list)
    fill_candidates: list[tuple[tuple, _Part]] = field(default_factory=list)  # (priority key, uninformative group)
    attempted_rewards: list[torch.Tensor] = field(default_factory=list)  # gathered reward matrix per round
    generated_ids: list[list[list[int]]] = field(default_factory=list)
    round_logs: dict[int, dict[str, Any]] = field(default_factory=dict)


class DynamicSamplingMixin(AssemblyMixin, StateMixin):
    """The dynamic-sampling half of `DAPOTrainer`: rounds and refill here, batch assembly and checkpoint state in
    the mixins it inherits.

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
        self._skip_counts = SkipCounts()  # this step's refill prompts
        self._reward_range = [math.inf, -math.inf]  # filter-reward extremes seen so far (all_max / all_min split)
        self._warned_fill = False

    def _seed_prompt_history(self, path: str, dataset_size: int) -> None:
        """Record a `trl-dapo profile` table in the prompt history (every process reads the same file)."""
        from ..preflight.difficulty import read_table, seed_history

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
        indices = self._refill_stream(groups_per_process * self.accelerator.num_processes, round_index)
        indices = local_share(indices, groups_per_process, self.accelerator.process_index)
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
            self._skip_counts = _added(
                self._skip_counts, SkipCounts(admission.skipped, admission.readmitted, admission.forced)
            )
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
            return fixed_first_refill(
                target, self.args.dynamic_sampling_oversample, self.args.dynamic_sampling_max_groups_per_step
            )
        own = self.accelerator.gather(torch.tensor(self._round_indices, device=self.accelerator.device)).cpu()
        own_strata = [[self._stratum(i) for i in row] for row in own.view(-1, target).tolist()]
        return self.refill_planner.first_round(
            target, rounds_left=max_rounds, own=own_strata, candidates=self._candidate_strata(round_index=1)
        )

    def _dynamic_sampling_batch(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor | Any]:
        """One optimizer batch of informative groups: rounds until every process holds ``target`` of them, or the
        round budget is spent; then the batch is assembled and its metrics logged."""
        step = self._begin_step(inputs)
        rows = inputs + self._refill_rows(step.first_refill, round_index=1)
        max_rounds = self.args.dynamic_sampling_max_rounds
        for round_index in range(1, max_rounds + 1):
            step.rounds = round_index
            self._run_round(step, rows, round_index)
            if int(step.kept_per_process.min()) >= step.target or round_index == max_rounds:
                break
            next_groups = self._next_round_groups(step, round_index)
            if next_groups is None:  # the per-step budget is spent, or no round could fill the batch
                break
            rows = self._refill_rows(next_groups, round_index=round_index + 1)
        if self.refill_planner is not None:
            self.refill_planner.end_step()
        self._logs = step.original_logs
        return self._finish_step(step)

    def _begin_step(self, inputs: list[dict[str, Any]]) -> _Step:
        target = len(inputs) // self.num_generations  # groups this process must deliver
        # The batch's own prompts: their dataset indices (taken out of the rows) say what they were last time.
        self._round_indices = [int(row.pop(PROMPT_INDEX_COLUMN, -1)) for row in inputs][:: self.num_generations]
        self._skip_counts = SkipCounts()
        self._step_seconds = 0.0
        return _Step(
            target=target,
            first_refill=self._first_refill(target, self.args.dynamic_sampling_max_rounds),
            metric_marks={key: len(values) for key, values in self._metrics["train"].items()},
            original_logs=self._logs,
            unscored=_Unscored.empty(len(self.reward_func_names)),
        )

    def _run_round(self, step: _Step, rows: list[dict[str, Any]], round_index: int) -> None:
        """Generate and score ``rows``; keep the informative groups the batch still needs; count the round."""
        args, G = self.args, self.num_generations
        if self.log_completions:
            self._logs = step.round_logs[round_index] = _empty_like(step.original_logs)
        started = time.perf_counter()
        output, record = self._scored_round(rows)
        self._time_round(len(rows), time.perf_counter() - started)
        step.unscored.add(record.rewards_per_func, self.filter_reward_indices, self.task_reward_indices)
        local_count = len(rows)
        if args.diagnostics:
            step.attempted_rewards.append(record.rewards_per_func)
            step.generated_ids.append(record.completion_ids)
        local_rewards = self._local_rows(record.rewards_per_func, local_count)

        # Which groups vary in the task reward (the overlong penalty never counts).
        filter_columns = local_rewards[:, self.filter_reward_indices]
        filter_rewards = combine_rewards(filter_columns, self.reward_weights[self.filter_reward_indices])
        informative = informative_groups(filter_rewards, G, args.dynamic_sampling_std_tolerance)
        self._update_reward_range(record.rewards_per_func)
        # One outcome per group: the zero-variance split and the prompt history both read it.
        outcomes = group_outcomes(filter_rewards, G, informative, *self._reward_range)

        already = sum(len(part.origin) for part in step.kept) // G
        informative_ids = informative.nonzero().flatten()
        take = informative_ids[: max(step.target - already, 0)]
        if len(take):
            step.kept.append(self._select_groups(output, record, local_rewards, take, round_index, local_count))
        if args.dynamic_sampling_on_exhausted == "fill":
            self._collect_fill_candidates(
                step.fill_candidates,
                output,
                record,
                local_rewards,
                filter_rewards,
                informative,
                round_index,
                local_count,
                room=step.target - already - len(take),
            )
        counts = GroupCounts(
            attempted=len(informative),
            informative=len(informative_ids),
            surplus=len(informative_ids) - len(take),
            all_max=outcomes.count(GroupOutcome.ALL_MAX),
            all_min=outcomes.count(GroupOutcome.ALL_MIN),
            other=outcomes.count(GroupOutcome.OTHER),
        )
        self._gather_counts(step, kept=already + len(take), counts=counts)
        self._observe_round(outcomes, *group_upper_counts(filter_rewards, G, *self._reward_range))
        self._show_progress(
            round_index,
            args.dynamic_sampling_max_rounds,
            int(step.kept_per_process.sum()),
            step.target * self.accelerator.num_processes,
        )

    def _gather_counts(self, step: _Step, kept: int, counts: GroupCounts) -> None:
        """Add every process's round counts to the step's totals, and record how many groups each process kept."""
        local = torch.tensor([kept, *counts], device=self.accelerator.device)
        gathered = self.accelerator.gather(local).view(self.accelerator.num_processes, -1).cpu()
        step.totals = _added(step.totals, GroupCounts(*(int(v) for v in gathered[:, 1:].sum(dim=0))))
        step.kept_per_process = gathered[:, 0]

    def _next_round_groups(self, step: _Step, round_index: int) -> int | None:
        """Refill groups (per process) of the next round, or None when the step stops: its budget
        (``dynamic_sampling_max_groups_per_step``) is spent, or the planner finds no round worth its cost.

        The same plan on every process (it only reads gathered counts), so every process generates alike. Both
        round sizings (the planner and the fixed factor) keep within the budget.
        """
        max_rounds, target = self.args.dynamic_sampling_max_rounds, step.target
        if self.refill_planner is not None:
            next_groups = self.refill_planner.next_round(
                (target - step.kept_per_process).clamp(min=0).tolist(),
                rounds_left=max_rounds - round_index,
                candidates=self._candidate_strata(round_index=round_index + 1),
            )
            return next_groups if next_groups != 0 else None
        budget = self.args.dynamic_sampling_max_groups_per_step
        # Every process generates rounds of one size, so its own groups so far are the global count's share.
        generated = step.totals.attempted // self.accelerator.num_processes
        next_groups = plan_refill_groups(
            missing_groups=int((target - step.kept_per_process).max()),
            attempted_groups=step.totals.attempted,
            informative_groups_seen=step.totals.informative,
            max_groups=target + step.first_refill,  # later rounds never larger than the first
            budget_left=budget - generated if budget is not None else None,
        )
        return next_groups if next_groups != 0 else None

    def _finish_step(self, step: _Step) -> dict[str, torch.Tensor | Any]:
        """Complete the batch with fill groups if allowed (or raise), assemble it and log the step's metrics."""
        args, target = self.args, step.target
        retained_per_process = step.kept_per_process.clamp(max=target)
        missing = target - sum(len(part.origin) for part in step.kept) // self.num_generations
        if int(retained_per_process.min()) < target:
            if args.dynamic_sampling_on_exhausted == "error":
                raise DynamicSamplingExhausted(
                    self._exhausted_message(step.rounds, step.totals, retained_per_process, target, step.unscored)
                )
            self._warn_fill_once(step.rounds, retained_per_process, target, step.unscored)
        fillers = [part for _, part in step.fill_candidates[: max(missing, 0)]]
        if len(fillers) < missing:  # cannot happen: every attempted group is either kept or a candidate
            raise RuntimeError(f"dynamic sampling lost track of groups: {missing} missing, {len(fillers)} fillers")

        batch, facts = self._assemble(step.kept + fillers)
        self._log_dynamic_sampling(
            step.rounds, step.totals, retained_per_process, len(fillers), step.metric_marks, facts
        )
        if args.diagnostics:
            self._log_diagnostics(
                attempted=step.attempted_rewards,
                update_rewards=facts.rewards_per_func,
                lengths=facts.lengths,
                truncated=facts.truncated,
                batch=batch,
                completion_ids=facts.completion_ids,
                generated_completion_ids=step.generated_ids,
            )
        if self.log_completions:
            self._rebuild_completion_logs(step.round_logs, facts)
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

    def _update_reward_range(self, rewards_per_func: torch.Tensor) -> None:
        filter_rewards = combine_rewards(
            rewards_per_func[:, self.filter_reward_indices], self.reward_weights[self.filter_reward_indices]
        )
        finite = filter_rewards[~torch.isnan(filter_rewards)]
        if finite.numel():
            self._reward_range[0] = min(self._reward_range[0], finite.min().item())
            self._reward_range[1] = max(self._reward_range[1], finite.max().item())

    def _log_dynamic_sampling(
        self, rounds: int, totals: GroupCounts, retained_per_process, filled: int, metric_marks, facts
    ) -> None:
        attempted = totals.attempted
        retained = int(retained_per_process.sum())
        device = self.accelerator.device
        filled_global = int(self.accelerator.gather(torch.tensor([filled], device=device)).sum())
        metrics = {
            N.DYNAMIC_SAMPLING_ROUNDS: rounds,
            N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS: attempted,
            N.DYNAMIC_SAMPLING_RETAINED_GROUPS: retained,
            N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS: totals.surplus,
            N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS: totals.zero_variance,
            N.DYNAMIC_SAMPLING_FILLED_GROUPS: filled_global,
            N.DYNAMIC_SAMPLING_RETENTION_RATE: retained / attempted if attempted else 0.0,
            N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS: attempted * self.num_generations,
            # The zero-variance split, every bucket: all_max + all_min + other = zero_variance_groups.
            N.DYNAMIC_SAMPLING_ALL_MAX_GROUPS: totals.all_max,
            N.DYNAMIC_SAMPLING_ALL_MIN_GROUPS: totals.all_min,
            N.DYNAMIC_SAMPLING_OTHER_ZERO_VARIANCE_GROUPS: totals.other,
        }
        metrics[N.DYNAMIC_SAMPLING_GENERATION_SECONDS] = self._step_seconds
        if self.refill_planner is not None:
            planner = self.refill_planner
            metrics[N.DYNAMIC_SAMPLING_EXPECTED_RETENTION] = planner.expected_retention()
            # Costs in completion-equivalents (a round costs round_latency + its completions): what the plan
            # expected at round 1, and what the rounds cost.
            metrics[N.DYNAMIC_SAMPLING_REALISED_COST] = planner.last_step["realised_cost"]
            metrics[N.DYNAMIC_SAMPLING_ROUND_LATENCY] = planner.last_step["latency"]
            metrics[N.DYNAMIC_SAMPLING_MEASURED_ROUND_LATENCY] = planner.cost_model.latency()
            metrics[N.DYNAMIC_SAMPLING_SECONDS_PER_COMPLETION] = planner.cost_model.seconds_per_completion()
            if planner.confidence is None:
                metrics[N.DYNAMIC_SAMPLING_EXPECTED_COST] = planner.last_step["expected_cost"]
                metrics[N.DYNAMIC_SAMPLING_PLANNED_FILL_CHANCE] = planner.last_step["fill_chance"]
        if self.skips_prompts:
            skips = self._skip_counts
            metrics.update(
                {
                    N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS: skips.skipped,
                    N.DYNAMIC_SAMPLING_READMITTED_PROMPTS: skips.readmitted,
                    N.DYNAMIC_SAMPLING_FORCED_PROMPTS: skips.forced,
                }
            )
        self._replace_trl_metrics(metric_marks, facts)
        train_metrics = self._metrics["train"]
        for key, value in metrics.items():
            train_metrics[key].append(float(value))

    def _show_progress(self, round_index: int, max_rounds: int, retained: int, target: int) -> None:
        text = f"round {round_index}/{max_rounds}, {retained}/{target} groups retained"
        logger.debug("dynamic sampling: %s", text)
        for callback in self.callback_handler.callbacks:
            bar = getattr(callback, "training_bar", None) if isinstance(callback, ProgressCallback) else None
            if bar is not None:
                bar.set_postfix_str(text, refresh=True)

    def _exhausted_message(
        self, rounds: int, totals: GroupCounts, retained_per_process, target: int, unscored: _Unscored
    ) -> str:
        where = f"dynamic sampling spent its budget of {rounds} generation rounds at step {self.state.global_step + 1}"
        if unscored.scorable == 0:
            return (
                f"{where}: 0 scorable completions, your reward returned NaN/None for all {unscored.rows} "
                f"({unscored.describe(self.reward_func_names)}), so no group can be informative. A reward returns "
                "None for a completion it cannot score: check that the dataset column it reads holds what it expects "
                "(see the warnings it printed)."
            )
        budget = self.args.dynamic_sampling_max_groups_per_step
        limits = "dynamic_sampling_max_rounds" + (
            f" or dynamic_sampling_max_groups_per_step={budget} (groups per process per step)"
            if budget is not None
            else ""
        )
        return (
            f"{where}: {totals.attempted} prompt groups attempted, {totals.informative} informative, retained per "
            f"process {retained_per_process.tolist()} of {target} needed{unscored.note(self.reward_func_names)}. "
            f"{no_contrast_cause(totals, self._reward_range) if totals.informative == 0 else ''}Raise {limits}, use prompts of mixed "
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


def _empty_like(logs: dict[str, Any]) -> dict[str, Any]:
    """Unbounded containers shaped like TRL's `_logs`, so a large round loses no rows before selection."""
    return {key: defaultdict(deque) if isinstance(value, defaultdict) else deque() for key, value in logs.items()}
