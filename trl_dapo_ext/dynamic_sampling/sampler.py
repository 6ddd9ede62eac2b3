"""`DynamicSampler`: the state that steers dynamic sampling across steps, and the decision after each round.

One object, owned by the trainer (``trainer.dynamic_sampling``), holds everything that outlives a step: the refill
prompt stream (`stream`), the round planner (`planner`, or the fixed first-round factor), the prompt history
(`history`) and the range of filter rewards seen so far. It never touches a model, TRL or a process group: the
trainer hands it gathered values, the same on every process, so every process keeps the same state and takes the
same decisions. Its `state_dict` is what a checkpoint saves of dynamic sampling (`state`).

Per step, in order (`rounds.BatchCollector` drives it):

1. :meth:`begin_step`, then :meth:`first_refill`: how many refill groups round 1 adds to the batch's own;
2. :meth:`draw`: the refill prompts of a round (dataset indices, this process's share);
3. after each round: :meth:`observe_rewards` (the reward range), :meth:`classify` (informative groups and
   outcomes), :meth:`observe_round_time` and :meth:`observe_groups` (planner estimates and prompt history);
4. :meth:`plan_round` on the step's gathered counts: refill groups for the next round, or stop;
5. :meth:`end_step`, then :meth:`step_metrics` for the log.

Example:
    >>> import torch
    >>> from trl_dapo_ext import DAPOConfig
    >>> args = DAPOConfig("out", dynamic_sampling=True, dynamic_sampling_oversample=2.0, use_cpu=True, bf16=False,
    ...                   report_to="none")
    >>> sampler = DynamicSampler(args, dataset_size=10, num_generations=2, filter_indices=[0],
    ...                          reward_weights=torch.ones(1))
    >>> sampler.begin_step(step=0, own_indices=[0, 1])
    >>> sampler.first_refill(target=2, own_indices=[0, 1])  # fixed factor 2.0: 2 more groups in round 1
    2
    >>> len(sampler.draw(2, round_index=1))
    2
    >>> sampler.plan_round(StepProgress(round_index=1, target=2, first_refill=2, kept_per_process=[1],
    ...                                 totals=GroupCounts(attempted=4, informative=1)))  # 1 short at 1/4 kept
    RoundPlan(groups=4, stop=None)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..core.advantages import combine_rewards
from ..core.groups import GroupOutcome, group_outcomes, group_upper_counts, informative_groups
from ..metric_names import N
from .counts import GroupCounts, SkipCounts, added
from .history import PromptHistory
from .planner import POOLED, RefillPlanner, fixed_first_refill, plan_refill_groups
from .profile_table import read_table, seed_history
from .screening import ScreeningEstimates
from .stream import RefillSampler, local_share


class StepProgress(NamedTuple):
    """Where a step stands after a round: gathered counts, the same on every process."""

    round_index: int  # the round just finished, counted from 1
    target: int  # informative groups each process must deliver
    first_refill: int  # refill groups round 1 added to each process's own
    kept_per_process: list[int]  # informative groups each process holds
    totals: GroupCounts  # every process's groups of the step's rounds so far


@dataclass(frozen=True)
class RoundPlan:
    """What follows a round: ``groups`` refill groups per process in the next round, or a stop and why.

    ``stop``: ``"full"`` (every process holds its target), ``"max_rounds"`` (that was the last round allowed) or
    ``"budget"`` (the per-step budget is spent, or the planner finds no round that could still fill the batch).
    """

    groups: int = 0
    stop: str | None = None


ROUND_STOPS: tuple[str | None, ...] = (None, "full", "max_rounds", "budget")  # every value of RoundPlan.stop


@dataclass
class RoundGroups:
    """One round's groups on this process, as the filter reward sees them."""

    filter_rewards: torch.Tensor  # (rows,) the filter reward of each completion
    informative: torch.Tensor  # (groups,) bool: the task reward varies within the group (DAPO Eq. 11)
    outcomes: list[GroupOutcome]  # informative, or which kind of zero-variance
    upper: list[int]  # per group: completions in the upper half of the reward range (-1: range not open yet)
    scorable: list[int]  # per group: completions with a filter reward


class DynamicSampler:
    """The refill stream, round planner, prompt history and reward range of a run, with one state dict.

    ``filter_indices``: the reward-matrix columns that decide whether a group is informative, weighted by
    ``reward_weights`` (the trainer resolves ``dynamic_sampling_reward_funcs`` to them). ``args``: the run's
    `DAPOConfig` (its ``dynamic_sampling_*`` fields, ``seed`` / ``data_seed`` and ``shuffle_dataset``).
    """

    def __init__(
        self,
        args: Any,
        *,
        dataset_size: int,
        num_generations: int,
        filter_indices: list[int],
        reward_weights: torch.Tensor,
        num_processes: int = 1,
        process_index: int = 0,
    ):
        self.args = args
        self.num_generations = num_generations
        self.num_processes = num_processes
        self.process_index = process_index
        self.filter_indices = list(filter_indices)
        self.reward_weights = reward_weights  # the trainer's tensor: its filter columns are read at every use
        seed = args.data_seed if args.data_seed is not None else args.seed
        self.stream = RefillSampler(dataset_size, seed=seed, shuffle=args.shuffle_dataset)
        # Round sizes: the adaptive planner (oversample=None) or a fixed first round (a number).
        self.planner: RefillPlanner | None = None
        # Screening sizes its rounds by the mixed-probe rate instead (screen_plan).
        screening = args.dynamic_sampling_screen_generations is not None or args.dynamic_sampling_fixed_budget
        if args.dynamic_sampling_oversample is None and not screening:
            self.planner = RefillPlanner(
                max_oversample=args.dynamic_sampling_max_oversample,
                max_groups_per_step=args.dynamic_sampling_max_groups_per_step,
                confidence=args.dynamic_sampling_confidence,
                decay=args.dynamic_sampling_retention_decay,
                num_processes=num_processes,
                generations=num_generations,
                round_latency=args.dynamic_sampling_round_latency,
                measure_latency=args.dynamic_sampling_measure_latency,
            )
        # Every prompt's last outcomes: the planner's strata, and (when a skip window is set) the skip rule.
        self.skips_prompts = args.dynamic_sampling_skip_window > 0
        self.history = PromptHistory(
            window=max(args.dynamic_sampling_skip_window, 1),
            floor=args.dynamic_sampling_skip_floor,
            seed=seed,
            generations=num_generations,
        )
        if args.dynamic_sampling_history_from is not None:
            self._seed_history(args.dynamic_sampling_history_from, dataset_size)
        # Screening: per stratum, the share of prompts whose probes are mixed and the share of agreeing prompts that
        # are informative once completed (decayed per step, like the planner's retention).
        self.screening = ScreeningEstimates(decay=args.dynamic_sampling_retention_decay)
        self.reward_range = [math.inf, -math.inf]  # filter-reward extremes seen so far (all_max / all_min split)
        self.warned_fill = False  # the fill warning is given once per run
        # Pipelined screening: the probes the last step's call made for the next step (a `carry.CarriedRound`, kept
        # apart from the JSON state: a checkpoint writes its tensors to a file of their own, see `state`).
        self.carried: Any = None
        self.begin_step(step=0)  # sets what lives for one step: step, skip_counts, generation_seconds

    def _seed_history(self, path: str, dataset_size: int) -> None:
        """Record a `trl-dapo profile` table in the prompt history (every process reads the same file)."""
        table = read_table(path)
        outside = [row.index for row in table if not 0 <= row.index < dataset_size]
        if outside:
            raise ValueError(
                f"dynamic_sampling_history_from={path!r} has dataset indices up to {max(outside)}, but train_dataset "
                f"has {dataset_size} rows: profile this same dataset (same rows, same order)."
            )
        seed_history(self.history, table)

    # ------------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Everything that steers refill (JSON-ready): the stream's position, the planner's estimates, the reward
        range seen so far (it splits the zero-variance groups and the history's tallies) and the history."""
        return {
            "refill": self.stream.state_dict(),
            "planner": self.planner.state_dict() if self.planner is not None else None,
            "history": self.history.state_dict(),
            "reward_range": list(self.reward_range),
            "screening": self.screening.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["refill"])
        for name, component in (("planner", self.planner), ("history", self.history)):
            if component is not None and state.get(name) is not None:
                component.load_state_dict(state[name])
        if state.get("reward_range") is not None:
            self.reward_range = [float(value) for value in state["reward_range"]]
        if state.get("screening") is not None:  # older checkpoints: no screening state
            self.screening.load_state_dict(state["screening"])

    # ------------------------------------------------------------------------------------------ refill prompts

    def begin_step(self, step: int, own_indices: list[int] = ()) -> None:
        """Start the rounds of training step ``step`` (the global step before it: it keys the skip coins), whose
        batch holds the prompts ``own_indices`` (every process's dataset indices; unshuffled, refills follow them)."""
        self.step = step
        self.stream.begin_step(list(own_indices))
        self.skip_counts = SkipCounts()  # refill prompts skipping passed over in this step
        self.generation_seconds = 0.0  # the step's generation and scoring time (slowest process)

    def draw(self, groups_per_process: int, round_index: int) -> list[int]:
        """Dataset indices of this process's ``groups_per_process`` refill prompts of round ``round_index``.

        Every process draws the same global slice and keeps its own part. With prompt-history skipping, prompts
        known to be zero-variance are mostly passed over (the same decision on every process: the coins are keyed
        by step, round and position).
        """
        if groups_per_process <= 0:
            return []
        indices = self._take(groups_per_process * self.num_processes, round_index)
        return local_share(indices, groups_per_process, self.process_index)

    def draw_each(self, counts: list[int], round_index: int) -> list[int]:
        """Like :meth:`draw`, with ``counts[p]`` prompts for process ``p`` (screening: processes with fewer
        completions to generate screen more). Every process draws the same global slice and keeps its own part.

        Example:
            >>> from types import SimpleNamespace
            >>> args = SimpleNamespace(data_seed=None, seed=0, shuffle_dataset=False, dynamic_sampling_oversample=1.0,
            ...                        dynamic_sampling_skip_window=0, dynamic_sampling_skip_floor=0.0,
            ...                        dynamic_sampling_history_from=None, dynamic_sampling_screen_generations=None,
            ...                        dynamic_sampling_fixed_budget=False, dynamic_sampling_retention_decay=0.8)
            >>> [DynamicSampler(args, dataset_size=9, num_generations=2, filter_indices=[0], reward_weights=None,
            ...                 num_processes=2, process_index=rank).draw_each([1, 3], round_index=1) for rank in (0, 1)]
            [[0], [1, 2, 3]]
        """
        indices = self._take(sum(counts), round_index) if sum(counts) else []
        start = sum(counts[: self.process_index])
        return indices[start : start + counts[self.process_index]]

    def _take(self, count: int, round_index: int, preview: bool = False) -> list[int]:
        """The next ``count`` global refill indices (skipping known zero-variance prompts when enabled).

        ``preview=True`` returns what a real draw would return without advancing the stream or the counters: the
        skip coins are keyed by (step, round, position, index), so the preview is the real draw's prefix.
        """
        if not self.skips_prompts:
            return self.stream.peek(count) if preview else self.stream.take(count)
        stream = copy.copy(self.stream) if preview else self.stream
        admission = self.history.admit(stream.take, count, step=self.step, round_index=round_index, commit=not preview)
        if not preview:
            self.skip_counts = added(
                self.skip_counts, SkipCounts(admission.skipped, admission.readmitted, admission.forced)
            )
        return admission.admitted

    def stratum(self, index: int) -> str:
        """The planner's stratum of a dataset index (``-1``: a row without a dataset index, pooled)."""
        return self.history.stratum(index) if index >= 0 else POOLED

    def _candidate_strata(self, round_index: int) -> Callable[[int], list[str]]:
        """For the planner: the strata of the refill prompts a round would draw (a preview of the stream)."""
        return lambda count: [self.stratum(i) for i in self._take(count, round_index, preview=True)]

    # ------------------------------------------------------------------------------------------ round sizes

    def first_refill(self, target: int, own_indices: list[int]) -> int:
        """Refill groups (per process) that round 1 adds to the batch's own ``target``: the fixed factor, or the
        planner's plan from the strata of every process's own prompts and a preview of the refill stream.

        ``own_indices``: every process's own prompts' dataset indices (gathered, ``target`` per process).
        """
        args = self.args
        if self.planner is None:
            return fixed_first_refill(
                target, args.dynamic_sampling_oversample, args.dynamic_sampling_max_groups_per_step
            )
        own_strata = [
            [self.stratum(i) for i in own_indices[start : start + target]]
            for start in range(0, len(own_indices), target)
        ]
        return self.planner.first_round(
            target,
            rounds_left=args.dynamic_sampling_max_rounds,
            own=own_strata,
            candidates=self._candidate_strata(round_index=1),
        )

    def plan_round(self, progress: StepProgress) -> RoundPlan:
        """After a round: refill groups (per process) for the next one, or a stop.

        The step stops when every process holds its target, after ``dynamic_sampling_max_rounds`` rounds, when its
        budget (``dynamic_sampling_max_groups_per_step``) is spent, or when the planner finds no round worth its
        cost. It reads only gathered counts, so every process plans alike; both round sizings (the planner and the
        fixed factor) keep within the budget.
        """
        max_rounds, target = self.args.dynamic_sampling_max_rounds, progress.target
        if min(progress.kept_per_process) >= target:
            return RoundPlan(stop="full")
        if progress.round_index == max_rounds:
            return RoundPlan(stop="max_rounds")
        missing = [max(target - kept, 0) for kept in progress.kept_per_process]
        if self.planner is not None:
            groups = self.planner.next_round(
                missing,
                rounds_left=max_rounds - progress.round_index,
                candidates=self._candidate_strata(round_index=progress.round_index + 1),
            )
        else:
            budget = self.args.dynamic_sampling_max_groups_per_step
            # Every process generates rounds of one size, so its own groups so far are the global count's share.
            generated = progress.totals.attempted // self.num_processes
            groups = plan_refill_groups(
                missing_groups=max(missing),
                attempted_groups=progress.totals.attempted,
                informative_groups_seen=progress.totals.informative,
                max_groups=target + progress.first_refill,  # later rounds never larger than the first
                budget_left=budget - generated if budget is not None else None,
            )
        return RoundPlan(groups=groups) if groups != 0 else RoundPlan(stop="budget")

    def end_step(self) -> None:
        if self.planner is not None:
            self.planner.end_step()
        self.screening.end_step()

    def mixed_rate(self) -> float:
        """The estimated share of screened prompts whose probes are mixed (this step's probes included)."""
        return self.screening.mixed_rate()

    # ------------------------------------------------------------------------------------------ observations

    def filter_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """The reward that decides informativeness: the selected columns, weighted (NaN terms ignored)."""
        return combine_rewards(rewards_per_func[:, self.filter_indices], self.reward_weights[self.filter_indices])

    def observe_rewards(self, rewards_per_func: torch.Tensor) -> None:
        """Widen the reward range with a round's gathered reward matrix (before its groups are classified)."""
        filter_rewards = self.filter_rewards(rewards_per_func)
        finite = filter_rewards[~torch.isnan(filter_rewards)]
        if finite.numel():
            self.reward_range[0] = min(self.reward_range[0], finite.min().item())
            self.reward_range[1] = max(self.reward_range[1], finite.max().item())

    def classify(self, rewards_per_func: torch.Tensor, size: int | None = None) -> RoundGroups:
        """This process's groups of a round (its rows of the reward matrix): informative or which zero-variance.
        ``size``: rows per group (default ``num_generations``; a screening probe has fewer)."""
        G = size or self.num_generations
        filter_rewards = self.filter_rewards(rewards_per_func)
        informative = informative_groups(filter_rewards, G, self.args.dynamic_sampling_std_tolerance)
        upper, scorable = group_upper_counts(filter_rewards, G, *self.reward_range)
        return RoundGroups(
            filter_rewards=filter_rewards,
            informative=informative,
            outcomes=group_outcomes(filter_rewards, G, informative, *self.reward_range),
            upper=upper,
            scorable=scorable,
        )

    def observe_round_time(self, completions: int, seconds: float) -> None:
        """A round's generation and scoring time (the slowest process's) for ``completions`` per process."""
        self.generation_seconds += seconds
        if self.planner is not None:
            self.planner.cost_model.observe(completions, seconds)

    def observe_groups(self, indices: list[int], outcomes: list[int], upper: list[int], scorable: list[int]) -> None:
        """Every process's groups of a round (gathered): counts per stratum for the planner, then the history.

        The strata are read before the history records this round, so each group counts in the stratum the planner
        saw when it sized the round. Index ``-1`` (a row without a dataset index) counts for the planner only.
        """
        if self.planner is not None:
            self.planner.observe_groups(
                [self.stratum(index) for index in indices],
                [outcome == GroupOutcome.INFORMATIVE for outcome in outcomes],
            )
        known = [position for position, index in enumerate(indices) if index >= 0]
        self.history.record(
            [indices[i] for i in known],
            [outcomes[i] for i in known],
            upper=[upper[i] for i in known],
            scorable=[scorable[i] for i in known],
        )

    def step_metrics(self) -> dict[str, float]:
        """The step's ``dynamic_sampling/`` metrics that this object knows: time, planner, skipped prompts."""
        metrics = {N.DYNAMIC_SAMPLING_GENERATION_SECONDS: self.generation_seconds}
        planner = self.planner
        if planner is not None:
            # The estimate the step was planned with (before its own outcomes were folded in).
            metrics[N.DYNAMIC_SAMPLING_EXPECTED_RETENTION] = planner.last_step["expected_retention"]
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
            metrics[N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS] = self.skip_counts.skipped
            metrics[N.DYNAMIC_SAMPLING_READMITTED_PROMPTS] = self.skip_counts.readmitted
            metrics[N.DYNAMIC_SAMPLING_FORCED_PROMPTS] = self.skip_counts.forced
        return metrics
