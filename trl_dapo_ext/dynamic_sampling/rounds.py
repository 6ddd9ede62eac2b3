"""The round loop of dynamic sampling: generate, score, keep informative groups, stop or ask for more.

For each optimizer batch, `DAPOTrainer` builds one :class:`BatchCollector`. It runs TRL's own generation and scoring
once per round (so every generation backend keeps working), keeps the groups whose task reward varies (DAPO Eq. 11,
:mod:`trl_dapo_ext.core.groups`), hands each round's gathered counts to the run's `sampler.DynamicSampler`, which
decides the next round (its size, from the refill planner, or a stop) and supplies its prompts, and finally
assembles exactly one batch of informative groups (`assembly`). Everything the collector holds lives for one step;
what outlives it is the sampler's, with one state dict (`state`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections import defaultdict, deque
from typing import Any

import datasets
import torch
from accelerate.utils import broadcast
from transformers.trainer_callback import ProgressCallback

from ..core.groups import GroupOutcome
from ..metric_names import N
from .assembly import (
    BatchRows,
    FillCandidate,
    RoundRows,
    SelectedGroups,
    assemble,
    best_fill_candidates,
    rebuild_completion_logs,
    replace_trl_metrics,
)
from .counts import GroupCounts, UnscoredRewards, added
from .messages import exhausted_message, fill_warning
from .sampler import ROUND_STOPS, DynamicSampler, RoundGroups, RoundPlan, StepProgress

logger = logging.getLogger(__name__)

# With dynamic sampling, each training row carries its dataset index in this column, so that the prompt history also
# learns from the dataloader's own prompts; it is removed before TRL (and the reward functions) see the rows.
PROMPT_INDEX_COLUMN = "dapo_ext_prompt_index"


def with_prompt_index(dataset: Any) -> Any:
    """A ``datasets.Dataset`` with :data:`PROMPT_INDEX_COLUMN` added; any other dataset unchanged (no index)."""
    if not isinstance(dataset, datasets.Dataset):
        return dataset
    if PROMPT_INDEX_COLUMN in dataset.column_names:
        raise ValueError(f"train_dataset already has a column {PROMPT_INDEX_COLUMN!r}; dynamic sampling needs it")
    return dataset.add_column(PROMPT_INDEX_COLUMN, list(range(len(dataset))))


def repeat_rows(rows: list[dict[str, Any]], times: int) -> list[dict[str, Any]]:
    """Each row ``times`` times, every copy its own dict (as TRL's sampler hands them out).

    TRL writes a ``rollout_func``'s per-completion extra fields into its input rows, and the reward functions read
    them from there: rows that shared one dict would all get the last completion's value.

    >>> rows = repeat_rows([{"prompt": "a"}], 2)
    >>> rows[0]["score"] = 1.0
    >>> rows
    [{'prompt': 'a', 'score': 1.0}, {'prompt': 'a'}]
    """
    return [dict(row) for row in rows for _ in range(times)]


class DynamicSamplingExhausted(RuntimeError):
    """The round budget ran out before the batch held enough informative groups (``on_exhausted="error"``)."""


def build_dynamic_sampler(trainer: Any) -> DynamicSampler:
    """The run's `DynamicSampler` for a constructed trainer: its dataset checked, its filter rewards resolved."""
    args = trainer.args
    dataset = trainer.train_dataset
    if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise ValueError(
            "dynamic_sampling draws refill prompts from train_dataset and needs a map-style dataset (with len "
            "and indexing); an IterableDataset or no dataset is not supported. Convert it with "
            "datasets.Dataset.from_generator / from_list, or set dynamic_sampling=False."
        )
    groups_per_batch = (
        args.per_device_train_batch_size * args.steps_per_generation // trainer.num_generations
    ) * trainer.accelerator.num_processes
    if len(dataset) < groups_per_batch:
        raise ValueError(
            f"train_dataset has {len(dataset)} prompts, but every optimizer batch needs {groups_per_batch} prompt "
            "groups: dynamic sampling could never fill a batch with distinct prompts. Use a larger dataset or a "
            "smaller per_device_train_batch_size * steps_per_generation / num_generations."
        )
    return DynamicSampler(
        args,
        dataset_size=len(dataset),
        num_generations=trainer.num_generations,
        filter_indices=filter_reward_indices(
            args.dynamic_sampling_reward_funcs, trainer.reward_func_names, trainer.task_reward_indices
        ),
        reward_weights=trainer.reward_weights,
        num_processes=trainer.accelerator.num_processes,
        process_index=trainer.accelerator.process_index,
    )


def gather_ints(accelerator: Any, values: list[int]) -> list[int]:
    """Every process's ``values``, concatenated in process order (the same list on every process)."""
    return accelerator.gather(torch.tensor(values, device=accelerator.device)).cpu().tolist()


def filter_reward_indices(selection: list[str] | None, names: list[str], task_indices: list[int]) -> list[int]:
    """Reward-matrix columns that ``dynamic_sampling_reward_funcs`` selects (names or indices; None: every task
    reward), never the overlong penalty's.

    >>> filter_reward_indices(["format", "0"], ["math", "format", "overlong_penalty"], [0, 1])
    [0, 1]
    """
    if selection is None:
        return list(task_indices)
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
                f"from {[names[i] for i in task_indices]} (or their indices)."
            )
        if index not in task_indices:
            raise ValueError(
                f"dynamic_sampling_reward_funcs selects {names[index]!r}, the overlong length penalty: groups "
                "are filtered on the task reward (DAPO filters on accuracy), never on length shaping."
            )
        indices.append(index)
    return sorted(set(indices))


class BatchCollector:
    """One optimizer batch of informative groups, collected over generation rounds: rounds until every process
    holds ``target`` of them or the step must stop, then the batch is assembled and its metrics logged.

    One object per step (``BatchCollector(trainer, inputs).collect()``): it runs the trainer's rounds
    (``trainer._scored_round``: TRL's ``_generate_and_score_completions`` and the rewards it scored), gathers each
    round's counts across processes and hands them to ``trainer.dynamic_sampling``, and keeps the selected groups.
    """

    def __init__(self, trainer: Any, inputs: list[dict[str, Any]]):
        self.trainer = trainer
        self.sampler: DynamicSampler = trainer.dynamic_sampling
        self.num_generations = G = trainer.num_generations
        self.inputs = inputs
        self.target = len(inputs) // G  # groups this process must deliver
        # The batch's own prompts: their dataset indices (taken out of the rows) say what they were last time.
        self.own_indices = [int(row.pop(PROMPT_INDEX_COLUMN, -1)) for row in inputs][::G]
        own_global = self._gathered(self.own_indices)  # every process's, in process order
        self.sampler.begin_step(trainer.state.global_step, own_global)
        self.first_refill = self._plan_first_round(own_global)  # refill prompts round 1 adds to the batch's own
        # Lengths of the logged metric lists before the step (TRL's batch metrics of the rounds are replaced).
        self.metric_marks = {key: len(values) for key, values in trainer._metrics["train"].items()}
        self.original_logs = trainer._logs  # TRL's completions-table buffers, restored after the rounds
        self.unscored = UnscoredRewards.empty(len(trainer.reward_func_names))
        self.rounds = 0
        self.totals = GroupCounts()
        self.kept_per_process: list[int] = []  # informative groups each process holds
        self.kept: list[SelectedGroups] = []  # informative groups of each round, in the order kept
        self.fill_candidates: list[FillCandidate] = []  # (priority key, one uninformative group), best first
        self.attempted_rewards: list[torch.Tensor] = []  # gathered reward matrix per round (diagnostics)
        self.generated_ids: list[list[list[int]]] = []  # completions per round (diagnostics)
        self.round_logs: dict[int, dict[str, Any]] = {}  # each round's completions-table buffers

    def _plan_first_round(self, own_global: list[int]) -> int:
        first_round = RoundPlan(groups=self.sampler.first_refill(self.target, own_global))
        return self._main_process_plan(first_round).groups

    def collect(self) -> dict[str, torch.Tensor | Any]:
        rows, indices = self._refill(self.first_refill, round_index=1, rows=self.inputs, indices=self.own_indices)
        round_index = 1
        while True:
            self.rounds = round_index
            self._run_round(rows, indices, round_index)
            plan = self._main_process_plan(
                self.sampler.plan_round(
                    StepProgress(round_index, self.target, self.first_refill, self.kept_per_process, self.totals)
                )
            )
            if plan.stop is not None:  # full, the last round allowed, or the budget is spent
                break
            round_index += 1
            rows, indices = self._refill(plan.groups, round_index)
        self.sampler.end_step()
        self.trainer._logs = self.original_logs
        return self._finish()

    def _main_process_plan(self, plan: RoundPlan) -> RoundPlan:
        """The main process's plan, on every process. Each process plans from the same gathered counts, but the
        planner's floating-point sums (and FFTs) may round differently on different CPU types, and at a near-tie
        that could pick different round sizes: the processes would then run mismatched collectives."""
        groups, stop = self._main_process_ints([plan.groups, ROUND_STOPS.index(plan.stop)])
        return RoundPlan(groups=groups, stop=ROUND_STOPS[stop])

    def _main_process_ints(self, values: list[int]) -> list[int]:
        """The main process's ``values`` (a decision every process must take alike), on every process."""
        accelerator = self.trainer.accelerator
        if accelerator.num_processes == 1:
            return [int(value) for value in values]
        encoded = torch.tensor([int(value) for value in values], device=accelerator.device)
        return [int(value) for value in broadcast(encoded, from_process=0).tolist()]

    def _gathered(self, values: list[int]) -> list[int]:
        return gather_ints(self.trainer.accelerator, values)

    def _refill(
        self, groups: int, round_index: int, rows: list | None = None, indices: list | None = None
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Rows of round ``round_index``: ``rows`` (with their dataset ``indices``) and ``groups`` fresh refill
        prompts, each repeated G times (as TRL's sampler does)."""
        rows, indices = list(rows or []), list(indices or [])
        dataset = self.trainer.train_dataset
        for index in self.sampler.draw(groups, round_index):
            row = dict(dataset[index])
            row.pop(PROMPT_INDEX_COLUMN, None)
            rows.extend(repeat_rows([row], self.num_generations))
            indices.append(index)
        return rows, indices

    def _run_round(self, rows: list[dict[str, Any]], indices: list[int], round_index: int) -> None:
        """Generate and score ``rows``; keep the informative groups the batch still needs; count the round."""
        trainer, sampler, G = self.trainer, self.sampler, self.num_generations
        if trainer.log_completions:
            trainer._logs = self.round_logs[round_index] = _empty_like(self.original_logs)
        started = time.perf_counter()
        output, scored = trainer._scored_round(rows)
        self._time_round(len(rows), time.perf_counter() - started)
        self.unscored.add(scored.rewards_per_func, sampler.filter_indices, trainer.task_reward_indices)
        if trainer.args.diagnostics:
            self.attempted_rewards.append(scored.rewards_per_func)
            self.generated_ids.append(scored.completion_ids)
        local_rewards = trainer._local_rows(scored.rewards_per_func, len(rows))
        sampler.observe_rewards(scored.rewards_per_func)
        groups = sampler.classify(local_rewards)  # which groups vary in the task reward (never the length penalty)

        round_rows = RoundRows(output, scored, local_rewards, round_index, local_count=len(rows))
        already = sum(len(part.origin) for part in self.kept) // G
        informative_ids = groups.informative.nonzero().flatten()
        take = informative_ids[: max(self.target - already, 0)]
        if len(take):
            self.kept.append(round_rows.select(take, G))
        if trainer.args.dynamic_sampling_on_exhausted == "fill":
            self.fill_candidates = best_fill_candidates(
                self.fill_candidates,
                round_rows,
                groups.filter_rewards,
                groups.informative,
                G,
                room=self.target - already - len(take),
            )
        counts = GroupCounts(
            attempted=len(groups.informative),
            informative=len(informative_ids),
            surplus=len(informative_ids) - len(take),
            all_max=groups.outcomes.count(GroupOutcome.ALL_MAX),
            all_min=groups.outcomes.count(GroupOutcome.ALL_MIN),
            other=groups.outcomes.count(GroupOutcome.OTHER),
        )
        self._gather_counts(kept=already + len(take), counts=counts)
        self._observe_groups(indices, groups)
        self._show_progress(round_index)

    def _time_round(self, completions: int, seconds: float) -> None:
        """A round's generation and scoring time, the slowest process's (the round ends when it does), for the
        planner's cost model and the step's ``generation_seconds``. Every process gets the same number."""
        accelerator = self.trainer.accelerator
        seconds_tensor = torch.tensor([seconds], dtype=torch.float64, device=accelerator.device)
        self.sampler.observe_round_time(completions, float(accelerator.gather(seconds_tensor).max()))

    def _gather_counts(self, kept: int, counts: GroupCounts) -> None:
        """Add every process's round counts to the step's totals, and record how many groups each process kept."""
        accelerator = self.trainer.accelerator
        local = torch.tensor([kept, *counts], device=accelerator.device)
        gathered = accelerator.gather(local).view(accelerator.num_processes, -1).cpu()
        self.totals = added(self.totals, GroupCounts(*(int(v) for v in gathered[:, 1:].sum(dim=0))))
        self.kept_per_process = gathered[:, 0].tolist()

    def _observe_groups(self, indices: list[int], groups: RoundGroups) -> None:
        """Every process's groups of this round, gathered, for the planner's strata and the prompt history."""
        accelerator = self.trainer.accelerator
        local = torch.tensor(
            [indices, [int(o) for o in groups.outcomes], groups.upper, groups.scorable], device=accelerator.device
        )
        gathered = accelerator.gather(local.unsqueeze(0)).cpu()  # (processes, 4, groups)
        self.sampler.observe_groups(*(gathered[:, row].flatten().tolist() for row in range(4)))

    def _show_progress(self, round_index: int) -> None:
        trainer = self.trainer
        max_rounds = trainer.args.dynamic_sampling_max_rounds
        target = self.target * trainer.accelerator.num_processes
        text = f"round {round_index}/{max_rounds}, {sum(self.kept_per_process)}/{target} groups retained"
        logger.debug("dynamic sampling: %s", text)
        for callback in trainer.callback_handler.callbacks:
            bar = getattr(callback, "training_bar", None) if isinstance(callback, ProgressCallback) else None
            if bar is not None:
                bar.set_postfix_str(text, refresh=True)

    def _finish(self) -> dict[str, torch.Tensor | Any]:
        """Complete the batch with fill groups if allowed (or raise), assemble it and log the step's metrics."""
        return self._complete_batch([[part] for _, part in self.fill_candidates])

    def _missing_groups(self) -> int:
        """Groups this process's batch still lacks."""
        return self.target - sum(len(part.origin) for part in self.kept) // self.num_generations

    def _complete_batch(self, fill_groups: list[list[SelectedGroups]], expected: bool = False) -> dict[str, Any]:
        """The kept groups and, for what they leave free, the first ``fill_groups`` (each a group's parts), masked.
        A batch short of informative groups goes through ``dynamic_sampling_on_exhausted`` unless that is
        ``expected`` (a fixed budget trains on what it found)."""
        target = self.target
        retained_per_process = [min(kept, target) for kept in self.kept_per_process]
        missing = self._missing_groups()
        if min(retained_per_process) < target and not expected:
            self._exhausted(retained_per_process)
        fillers = fill_groups[: max(missing, 0)]
        if len(fillers) < missing:  # cannot happen: every attempted group is either kept or a fill candidate
            raise RuntimeError(f"dynamic sampling lost track of groups: {missing} missing, {len(fillers)} fillers")
        parts = self.kept + [part for group in fillers for part in group]
        return self._assemble(parts, len(fillers), retained_per_process)

    def _assemble(
        self, parts: list[SelectedGroups], filled: int, retained_per_process: list[int]
    ) -> dict[str, torch.Tensor | Any]:
        """The update batch of ``parts`` (``filled`` of its groups masked fill groups), its metrics logged."""
        trainer = self.trainer
        batch, rows = assemble(
            parts,
            pad_token_id=trainer._tokenizer.pad_token_id,
            accelerator=trainer.accelerator,
            advantages=trainer._advantages,
            loss_type=trainer.args.loss_type,
            mask_unscored=trainer.args.mask_unscored_completions,
        )
        self._log_step(retained_per_process, filled, rows)
        if trainer.args.diagnostics:
            trainer.diagnostics.log_batch(
                attempted=self.attempted_rewards,
                update_rewards=rows.rewards_per_func,
                lengths=rows.lengths,
                truncated=rows.truncated,
                batch=batch,
                completion_ids=rows.completion_ids,
                generated_completion_ids=self.generated_ids,
            )
        if trainer.log_completions:
            rebuild_completion_logs(
                trainer._logs,
                self.round_logs,
                rows,
                accelerator=trainer.accelerator,
                reward_func_names=trainer.reward_func_names,
            )
        return batch

    def _exhausted(self, retained_per_process: list[int]) -> None:
        """Raise under ``on_exhausted="error"``; under ``"fill"``, warn once per run."""
        trainer, sampler = self.trainer, self.sampler
        if trainer.args.dynamic_sampling_on_exhausted == "error":
            raise DynamicSamplingExhausted(
                exhausted_message(
                    step=trainer.state.global_step + 1,
                    rounds=self.rounds,
                    totals=self.totals,
                    retained_per_process=retained_per_process,
                    target=self.target,
                    unscored=self.unscored,
                    reward_func_names=trainer.reward_func_names,
                    reward_range=sampler.reward_range,
                    max_groups_per_step=trainer.args.dynamic_sampling_max_groups_per_step,
                )
            )
        if not sampler.warned_fill:
            sampler.warned_fill = True
            warnings.warn(
                fill_warning(self.rounds, retained_per_process, self.target, self.unscored, trainer.reward_func_names),
                stacklevel=2,
            )

    def _generated_completions(self) -> int:
        """Completions the step generated, every process's: a full group per attempted prompt."""
        return self.totals.attempted * self.num_generations

    def _extra_step_metrics(self) -> dict[str, float]:
        return {}

    def _log_step(self, retained_per_process: list[int], filled: int, rows: BatchRows) -> None:
        """The step's ``dynamic_sampling/`` metrics, and TRL's batch metrics recomputed on the update batch."""
        trainer, totals = self.trainer, self.totals
        attempted, retained = totals.attempted, sum(retained_per_process)
        accelerator = trainer.accelerator
        filled_global = int(accelerator.gather(torch.tensor([filled], device=accelerator.device)).sum())
        metrics = {
            N.DYNAMIC_SAMPLING_ROUNDS: self.rounds,
            N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS: attempted,
            N.DYNAMIC_SAMPLING_RETAINED_GROUPS: retained,
            N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS: totals.surplus,
            N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS: totals.zero_variance,
            N.DYNAMIC_SAMPLING_FILLED_GROUPS: filled_global,
            N.DYNAMIC_SAMPLING_RETENTION_RATE: retained / attempted if attempted else 0.0,
            N.DYNAMIC_SAMPLING_INFORMATIVE_RATE: totals.informative / attempted if attempted else 0.0,
            N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS: self._generated_completions(),
            # The zero-variance split, every bucket: all_max + all_min + other = zero_variance_groups.
            N.DYNAMIC_SAMPLING_ALL_MAX_GROUPS: totals.all_max,
            N.DYNAMIC_SAMPLING_ALL_MIN_GROUPS: totals.all_min,
            N.DYNAMIC_SAMPLING_OTHER_ZERO_VARIANCE_GROUPS: totals.other,
            **self.sampler.step_metrics(),
            **self._extra_step_metrics(),
        }
        train_metrics = trainer._metrics["train"]
        replace_trl_metrics(
            train_metrics,
            self.metric_marks,
            rows,
            gather=accelerator.gather,
            device=accelerator.device,
            reward_weights=trainer.reward_weights,
            reward_func_names=trainer.reward_func_names,
            num_generations=self.num_generations,
            scale_rewards=trainer.args.scale_rewards,
        )
        for key, value in metrics.items():
            train_metrics[key].append(float(value))


def _empty_like(logs: dict[str, Any]) -> dict[str, Any]:
    """Unbounded containers shaped like TRL's `_logs`, so a large round loses no rows before selection."""
    return {key: defaultdict(deque) if isinstance(value, defaultdict) else deque() for key, value in logs.items()}
