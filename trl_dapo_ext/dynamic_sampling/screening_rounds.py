"""Screening rounds: probe each prompt with k completions, complete to a full group only those that can teach.

`ScreeningCollector` is the `rounds.BatchCollector` of ``dynamic_sampling_screen_generations=k`` (and of
``dynamic_sampling_fixed_budget``). Each round generates, on every process, first the completions of the prompts whose
probes were mixed in the previous round (``G - k`` more rows each), then the probes of new prompts (``k`` rows each):
TRL generates the round with ``num_generations`` set to ``k``, so that every ``k`` consecutive rows are one prompt's,
whatever the backend. A completed prompt's group is its probe rows (from the earlier round) followed by its
completion rows: one policy generated both (no optimizer step between the rounds of a step), and each row keeps the
old log-probabilities and vLLM importance weights of its own round. A prompt whose probes all agree is completed
too when that is worth its cost (`screening.worth_completing`: its stratum's chance of turning informative at G per
completion, against the informative groups per completion of screening new prompts, round latency included);
otherwise it is dropped, having cost ``k`` completions. Every probe teaches the prompt history and the per-stratum
estimates (`screening.ScreeningEstimates`, in the sampler and its checkpoint state).

How many new prompts a round screens is `screen_plan.screening_round`'s decision, from gathered counts, taken by the
main process and broadcast. With a fixed budget the step generates at most the batch's rows per process and trains on
the informative groups it found; the rest of the batch is masked (fill groups: uninformative groups, or the probes of
dropped prompts repeated to a group's size, out of the loss and of its denominator). Without screening (``k = G``)
the same collector trains GRPO's own groups with the zero-variance ones masked.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from accelerate.utils import gather_object

from ..core.groups import GroupOutcome
from ..metric_names import N
from .assembly import RoundRows, SelectedGroups
from .carry import CARRIED_ROUND, CarriedRound, carry_round, shared_logs
from .counts import GroupCounts, added
from .history import UNSEEN
from .rounds import PROMPT_INDEX_COLUMN, BatchCollector, _empty_like, gather_ints, repeat_rows
from .screen_plan import probes_to_fill, screening_round, wanted_probes
from .screening import AGREE_HIGH, AGREE_LOW, stream_rate, worth_completing
from .state import generation_cycle, micro_steps_per_cycle

# Share of the agreeing prompts completed whatever their estimate (a seeded coin per step and prompt, the same on every
# process), so that a stratum judged not worth completing is still measured and can be judged again.
EXPLORE_SHARE = 0.05
_MILLI = 1000  # expected groups travel between processes as integers, in thousandths
_DIRECTIONS = {int(GroupOutcome.ALL_MAX): AGREE_HIGH, int(GroupOutcome.ALL_MIN): AGREE_LOW}


def collector_class(args: Any) -> type[BatchCollector]:
    """The collector of a step: screening (or a fixed budget) collects its own way, refill the usual one."""
    if args.dynamic_sampling_screen_generations is not None or args.dynamic_sampling_fixed_budget:
        return ScreeningCollector
    return BatchCollector


@dataclass
class Probe:
    """A prompt screened on this process: its dataset row and index, and where its ``k`` probe rows are."""

    row: dict[str, Any]
    index: int
    round_rows: RoundRows
    rows: torch.Tensor  # local rows of ``round_rows``
    stratum: str = UNSEEN  # its prompt-history stratum when it was screened
    agreed: str | None = None  # completed although its probes agreed: in which direction (AGREE_HIGH / AGREE_LOW)
    chance: float = 1.0  # chance that its full group is informative (1 for mixed probes)
    outcome: tuple[int, int, int] | None = None  # its probes' (outcome, upper, scorable), for the prompt history

    def part(self, filled: bool = False) -> SelectedGroups:
        return self.round_rows.take(self.rows, filled)

    def as_fill_group(self, num_generations: int) -> list[SelectedGroups]:
        """The probes repeated to a group's size: rows for a masked fill group (never trained on)."""
        return [self.round_rows.take(self.rows.repeat(num_generations // len(self.rows)), filled=True)]


class ScreeningCollector(BatchCollector):
    """One optimizer batch collected with screening (see the module docstring)."""

    def __init__(self, trainer: Any, inputs: list[dict[str, Any]]):
        args = trainer.args
        self.probe_size = args.dynamic_sampling_screen_generations or trainer.num_generations
        self.fixed_budget = args.dynamic_sampling_fixed_budget
        self.pending: list[Probe] = []  # mixed probes (then agreeing ones worth it), completed in the next round
        self.fill_pool: list[list[SelectedGroups]] = []  # uninformative groups (or repeated probes) for masking
        self.generated_rows = 0  # rows of every round, every process
        self.funnel = [0, 0]  # screened prompts and those dropped after their probes (every process)
        self.stranded = 0  # prompts probed in the step's last round (every process): nothing could complete them
        # Pipelined screening (`carry`): the probes the previous generation cycle's call made are completed in round
        # 1; a cycle with a next one ends with a carry round, whose probes the next cycle completes. A cycle is one
        # generation batch (TRL's, every steps_per_generation * num_iterations micro-batches): one step by default.
        self.pipeline = args.dynamic_sampling_pipeline
        self.cycle = generation_cycle(trainer)
        micro_steps = micro_steps_per_cycle(args)
        self.next_step = self.pipeline and trainer._step + micro_steps < trainer.state.max_steps * (
            args.gradient_accumulation_steps
        )
        if self.next_step and args.max_generated_completions is not None:
            # The run stops at the step end where the charged completions reach the budget: a cycle whose plain
            # cycle's worth would reach it probes nothing for a cycle that may not come (it screens within itself).
            charged = trainer.budget_meter.charged()
            self.next_step = charged + args.generation_batch_size < args.max_generated_completions
        self.completing: int | None = None  # pending prompts the next round completes (None: all)
        self.carry_dropped = 0  # probes worth completing that the next step cannot take (every process)
        self.carried_out = 0  # probes handed to the next step (every process)
        target = len(inputs) // trainer.num_generations  # BatchCollector's target, set once __init__ runs
        carried, carried_logs = self._take_carried(trainer, target) if self.pipeline else ([], None)
        self.pending = carried
        # Every process makes the same calls: the step completes carried probes in round 1 if any process has some.
        anything_carried = self.pipeline and max(gather_ints(trainer.accelerator, [len(carried)])) > 0
        self.carry_round = (1 if anything_carried else 2) if self.next_step else None
        self.carrying = False  # the current round is the carry round
        super().__init__(trainer, inputs)
        if carried_logs is not None and trainer.log_completions:
            self.round_logs[CARRIED_ROUND] = carried_logs

    # ------------------------------------------------------------------------------------------------ sizes

    @property
    def units_to_complete(self) -> int:
        """Rounds' units (``k`` rows) that complete one screened prompt to a full group."""
        return self.num_generations // self.probe_size - 1

    def _budget_units(self) -> int | None:
        """What the step may generate per process, in units of ``k`` completions (None: no budget)."""
        groups = self.target if self.fixed_budget else self.trainer.args.dynamic_sampling_max_groups_per_step
        return None if groups is None else groups * self.num_generations // self.probe_size

    def _plan(
        self,
        round_index: int,
        kept: list[int],
        pending: list[int],
        used_units: int,
        expected: list[float] | None = None,
    ) -> list[int] | None:
        """New probes per process for round ``round_index + 1``, or None to stop (every process holds its target,
        or no round is left or worth generating). ``expected``: the informative groups each process's pending
        completions are expected to give (a mixed prompt 1, an agreeing one its chance; default: ``pending``).
        The main process's plan, on every process."""
        args = self.trainer.args
        budget = self._budget_units()
        stop = min(kept) >= self.target or round_index >= args.dynamic_sampling_max_rounds
        counts = [0] * len(kept)
        if not stop:
            completion_rounds = 1 if self.units_to_complete else 0
            counts = screening_round(
                missing=[max(self.target - k - e, 0.0) for k, e in zip(kept, expected or pending)],
                pending=pending,
                units_to_complete=self.units_to_complete,
                mixed_rate=self.sampler.mixed_rate(),
                may_screen=round_index + 1 + completion_rounds <= args.dynamic_sampling_max_rounds,
                budget_units=None if budget is None else budget - used_units,
                max_probes=int(args.dynamic_sampling_max_oversample * self.target),
            )
            stop = not any(counts) and not any(pending)
        stop, *counts = self._main_process_ints([int(stop), *counts])  # see BatchCollector._main_process_plan
        return None if stop else counts

    def _plan_first_round(self, own_global: list[int]) -> int:
        """Extra probes (per process) round 1 adds to the batch's own prompts (``self.first_probes``: round 1's
        probes in all, the own prompts first)."""
        processes, index = self.trainer.accelerator.num_processes, self.trainer.accelerator.process_index
        if self.carry_round == 2:
            # Nothing carried: round 1 screens within the step, keeping the batch's groups' worth of units for the
            # carry round's probes (else completing round 1's prompts could spend it all, and the next step would
            # start unpipelined again).
            counts = self._plan(0, [0] * processes, [0] * processes, used_units=self.target)
            self.first_probes = counts[index] if counts else 0
            if not self.first_probes:  # too small a budget to split: the step's one call is the carry round
                self.carry_round = 1
        if self.carry_round == 1:
            self.first_probes = self._carry_probes(used_units=0)[index]
        elif self.carry_round is None:
            expected = round(sum(probe.chance for probe in self.pending) * _MILLI)
            pending, expected = self._gathered_columns(len(self.pending), expected)
            expected = [e / _MILLI for e in expected]
            counts = self._plan(0, [0] * processes, pending, used_units=0, expected=expected)
            self.first_probes = (counts or [self.target] * processes)[index]
        return max(self.first_probes - self.target, 0)

    def _carry_probes(self, used_units: int) -> list[int]:
        """New probes per process of a carry round, for the next step's batch, at most ``max_oversample`` times its
        groups. Under the fixed budget: what the budget leaves after the round's completions, at most the batch's
        groups at the estimated mixed share (their completions are the next step's, under its own budget). With
        refill: enough that the next step finds its groups among them with chance
        ``dynamic_sampling_carry_fill_chance`` (else it needs another call). Every process's call is as large (TRL's collectives): its own completions first, then
        probes, so a process with fewer completions probes more; every process computes the same sizes from
        gathered counts."""
        completing = self._completing_count()
        # What the next batch still misses: a refill step that completes only some of its pending prompts hands
        # the others on (`_refill_after_carry`), in thousandths of a group.
        handed_on = round(sum(probe.chance for probe in self.pending[completing:]) * _MILLI)
        counts, handed_on = self._gathered_columns(completing, handed_on)
        completions = [count * self.units_to_complete for count in counts]
        missing = [math.ceil(self.target - value / _MILLI - 1e-9) for value in handed_on]
        cap = int(self.trainer.args.dynamic_sampling_max_oversample * self.target)
        mixed_rate = self.sampler.mixed_rate()
        if self.fixed_budget:
            wanted = [min(wanted_probes(self.target, mixed_rate), cap)] * len(counts)
            room = self._budget_units() - used_units  # the same on every process: its rounds were as large
        else:
            chance = self.trainer.args.dynamic_sampling_carry_fill_chance
            wanted = [probes_to_fill(groups, mixed_rate, chance, cap) for groups in missing]
            room = math.inf
        largest = max(done + want for done, want in zip(completions, wanted))
        units = max(min(largest, room), max(completions))
        return [units - done for done in completions]

    def _completing_count(self) -> int:
        """Pending prompts the next round completes: all, except after a refill carry round (`_refill_after_carry`)."""
        return len(self.pending) if self.completing is None else self.completing

    # ------------------------------------------------------------------------------------------------ rounds

    def collect(self) -> dict[str, torch.Tensor | Any]:
        own = [(row, index) for row, index in zip(self.inputs[:: self.num_generations], self.own_indices)]
        extra = self.sampler.draw_each(self._gathered([self.first_refill]), round_index=1)
        new = own[: self.first_probes] + [(self._dataset_row(index), index) for index in extra]
        unprobed = own[self.first_probes :] if self.carry_round else []  # the carry round probes them first
        round_index, used_units = 1, 0
        while True:
            self.rounds = round_index
            self.carrying = round_index == self.carry_round
            used_units += self._completing_count() * self.units_to_complete + len(new)
            self._screening_round(new, round_index, used_units)
            counts = (
                self._refill_after_carry(round_index) if self.carrying else self._next_round(round_index, used_units)
            )
            if counts is None:
                break
            round_index += 1
            taken = []
            if self.carry_round:  # the batch's own prompts not yet probed go first, then refill prompts
                own_count = counts[self.trainer.accelerator.process_index]
                taken, unprobed = unprobed[:own_count], unprobed[own_count:]
                counts = [count - own for count, own in zip(counts, self._gathered([len(taken)]))]
            indices = self.sampler.draw_each(counts, round_index)
            new = taken + [(self._dataset_row(index), index) for index in indices]
        if self.carrying:
            self._hand_on()
        if self.pipeline:  # carried probes too stale to complete: dropped like the rest
            self.carry_dropped += sum(self._gathered([len(self.stale_dropped)]))
            self.pending += self.stale_dropped
        self._end_funnel(stranded=len(new) if self.units_to_complete and not self.carrying else 0)
        self.sampler.end_step()
        self.trainer._logs = self.original_logs
        return self._finish()

    def _next_round(self, round_index: int, used_units: int) -> list[int] | None:
        """New probes per process of the round after ``round_index`` (not a carry round), or None to stop."""
        expected = round(sum(probe.chance for probe in self.pending) * _MILLI)
        kept, pending, expected = self._gathered_columns(self._kept_groups(), len(self.pending), expected)
        counts = self._plan(round_index, kept, pending, used_units, [e / _MILLI for e in expected])
        if round_index + 1 == self.carry_round:
            counts = self._carry_probes(used_units)
            if not any(counts) and not any(pending):
                counts = None
        return counts

    # ------------------------------------------------------------------------------------------------ the carry

    def _refill_after_carry(self, round_index: int) -> list[int] | None:
        """After a carry round, with refill (no fixed budget): if a process's batch is still short (its carried
        prompts did not all turn informative, or too few were carried), one more round completes what each
        process misses from the prompts pending (the carry round's probes, mixed first: the same policy) and probes
        anew for the next step; it is the step's carry round now. New probes per process, or None: every batch is
        full, the fixed budget (its steps end with the carry round), or no round is left."""
        if self.fixed_budget or round_index >= self.trainer.args.dynamic_sampling_max_rounds:
            return None
        if min(self._gathered([self._kept_groups()])) >= self.target:
            return None
        self.completing = min(self.target - self._kept_groups(), len(self.pending))
        self.carry_round = round_index + 1
        return self._carry_probes(used_units=0)  # no budget: what was used does not limit it

    def _take_carried(self, trainer: Any, target: int) -> tuple[list[Probe], dict[str, Any] | None]:
        """The probes the previous step handed on (`carry`), as pending prompts of round 1, at most the batch's
        ``target`` groups; probes from another step than the previous one (more than one step stale) are dropped."""
        carried: CarriedRound | None = trainer.dynamic_sampling.carried
        trainer.dynamic_sampling.carried = None
        self.stale_dropped: list[Probe] = []
        logs = None
        if trainer.log_completions:  # every process's carried entries, in one buffer (gathered on every process)
            rows = 0 if carried is None else len(carried.rows.output["completion_ids"])
            logs, stride = shared_logs(carried.logs if carried is not None else None, rows)
            if carried is not None:
                carried.rows.local_count = stride
        if carried is None:
            return [], logs
        k = carried.probe_size
        probes = [
            Probe(round_rows=carried.rows, rows=torch.arange(i * k, (i + 1) * k), **fields)
            for i, fields in enumerate(carried.probes)
        ]
        fresh = carried.cycle == self.cycle - 1
        keep = probes[:target] if fresh else []
        self.stale_dropped = probes[len(keep) :]
        return keep, logs

    def _hand_on(self) -> None:
        """After the carry round: its pending prompts (at most the next batch's groups, mixed ones first) go to the
        next step; the rest are dropped like any prompt not completed."""
        carried, self.pending = self.pending[: self.target], self.pending[self.target :]
        self.carry_dropped += sum(self._gathered([len(self.pending)]))
        self.carried_out = sum(self._gathered([len(carried)]))
        if carried:
            trainer = self.trainer
            logs = self.round_logs
            pad_token_id, process_index = trainer._tokenizer.pad_token_id, trainer.accelerator.process_index
            self.sampler.carried = carry_round(carried, self.cycle, pad_token_id, logs, process_index)
            if trainer.carried_logps_only:  # trained next step, against this policy's log-probabilities
                trainer._record_old_logps(self.sampler.carried.rows.output)
            # Last resort fill material: a carried probe, repeated and masked here, is trained on next step.
            self.fill_pool.extend(probe.as_fill_group(self.num_generations) for probe in carried)

    def _end_funnel(self, stranded: int) -> None:
        """The probes still pending when the step ends (no round is left to complete them): dropped, counted and
        taught to the prompt history like every other dropped prompt. ``stranded``: prompts this process probed in
        the step's last round (every one of them is dropped: no later round of the step could complete it)."""
        leftovers, self.pending = self.pending, []
        observed = self._drop(leftovers)
        gathered = self._gathered_columns(len(leftovers), stranded)
        self.funnel[1] += sum(gathered[0])
        self.stranded = sum(gathered[1])
        every = [item for part in gather_object([observed]) for item in part]
        if every:
            self.sampler.observe_groups(*(list(column) for column in zip(*every)))

    def _trim_pending(self, used_units: int) -> list[Probe]:
        """Under a budget, the mixed prompts whose completion no longer fits, taken out of ``pending`` (the same cap
        on every process: rounds are equal, so is what they used). Each probe reserves its completion when it is
        planned; only a process that screened more than it asked for, to keep the rounds equal, can find its
        reserve spent."""
        budget = self._budget_units()
        if budget is None or not self.units_to_complete or self.carrying:  # a carry round's: the next step's budget
            return []
        fits = max(budget - used_units, 0) // self.units_to_complete
        trimmed, self.pending = self.pending[fits:], self.pending[:fits]
        return trimmed

    def _dataset_row(self, index: int) -> dict[str, Any]:
        row = dict(self.trainer.train_dataset[index])
        row.pop(PROMPT_INDEX_COLUMN, None)
        return row

    def _kept_groups(self) -> int:
        return self.target - self._missing_groups()

    def _gathered_columns(self, *values: int) -> tuple[list[int], ...]:
        """Every process's ``values``, one list per value (in process order)."""
        gathered = self._gathered(list(values))
        return tuple(gathered[i :: len(values)] for i in range(len(values)))

    def _screening_round(self, new: list[tuple[dict[str, Any], int]], round_index: int, used_units: int) -> None:
        """Generate the pending completions and the new prompts' probes; keep, queue or drop each prompt.
        ``used_units``: what the step has generated per process with this round, in units of ``k`` rows."""
        G, k = self.num_generations, self.probe_size
        count = self._completing_count()
        completing, self.pending, self.completing = self.pending[:count], self.pending[count:], None
        rows = repeat_rows([probe.row for probe in completing], G - k) + repeat_rows([row for row, _ in new], k)
        round_rows = self._generated_round(rows, round_index)
        observed: list[tuple[int, int, int, int]] = []
        counts, agreeing_records, groups = self._completed_groups(completing, round_rows, observed)
        first_probe_row = len(completing) * (G - k)
        probes = [
            Probe(
                row,
                index,
                round_rows,
                torch.arange(first_probe_row + i * k, first_probe_row + (i + 1) * k),
                stratum=self.sampler.stratum(index),
            )
            for i, (row, index) in enumerate(new)
        ]
        probe_counts, probe_records, dropped = self._probed_prompts(probes, observed)
        dropped += self._trim_pending(used_units)
        observed += self._drop(dropped)
        counts = added(counts, probe_counts)
        self._gather_round(counts, len(dropped), observed, probe_records, agreeing_records, groups, round_index)

    def _generated_round(self, rows: list[dict[str, Any]], round_index: int) -> RoundRows:
        """One generation call on ``rows`` (TRL's, in groups of ``k``), timed, counted and scored."""
        trainer, sampler = self.trainer, self.sampler
        # Pipelined, every round keeps its table entries: a probe carried from a step without the table may be
        # trained at a step with it (the notebooks' `CompletionsEvery` turns it on every N steps).
        if trainer.log_completions or self.pipeline:
            trainer._logs = self.round_logs[round_index] = _empty_like(self.original_logs)
        started = time.perf_counter()
        output, scored = self._generate(rows)
        self._time_round(len(rows), time.perf_counter() - started)
        self.generated_rows += len(rows) * trainer.accelerator.num_processes
        self.unscored.add(scored.rewards_per_func, sampler.filter_indices, trainer.task_reward_indices)
        if trainer.args.diagnostics:
            self.generated_ids.append(scored.completion_ids)
        local_rewards = trainer._local_rows(scored.rewards_per_func, len(rows))
        sampler.observe_rewards(scored.rewards_per_func)
        return RoundRows(output, scored, local_rewards, round_index, local_count=len(rows))

    def _completed_groups(
        self, completing: list[Probe], round_rows: RoundRows, observed: list
    ) -> tuple[GroupCounts, list[tuple[str, str, bool]], list[list[SelectedGroups]]]:
        """The groups of the prompts completed this round (probe rows, then completion rows): kept while the batch
        needs them. Returns their counts, the agreeing prompts' outcomes (for the estimates) and the groups."""
        G, k = self.num_generations, self.probe_size
        groups = [
            [probe.part(), round_rows.take(torch.arange(position * (G - k), (position + 1) * (G - k)))]
            for position, probe in enumerate(completing)
        ]
        if not groups:
            return GroupCounts(), [], groups
        classified = self.sampler.classify(torch.cat([part.rewards_per_func for g in groups for part in g]), size=G)
        counts = self._keep(groups, classified, completing, observed)
        agreeing_records = [
            (probe.stratum, probe.agreed, bool(flag))
            for probe, flag in zip(completing, classified.informative.tolist())
            if probe.agreed is not None
        ]
        return counts, agreeing_records, groups

    def _probed_prompts(
        self, probes: list[Probe], observed: list
    ) -> tuple[GroupCounts, list[tuple[str, bool]], list[Probe]]:
        """Classify the new prompts' probes: queue the mixed ones (and the agreeing ones worth it) for completion.
        Returns the counts of whole groups (``k = G``: the probes are a group), the probe records (stratum, mixed)
        and the prompts to drop."""
        if not probes:
            return GroupCounts(), [], []
        rewards = torch.cat([probe.part().rewards_per_func for probe in probes])
        classified = self.sampler.classify(rewards, size=self.probe_size)
        if self.probe_size == self.num_generations:
            return self._keep([[p.part()] for p in probes], classified, probes, observed), [], []
        records, mixed_probes, agreeing = [], [], []
        for probe, mixed, *outcome in zip(probes, classified.informative.tolist(), *self._per_group(classified)):
            records.append((probe.stratum, bool(mixed)))
            probe.outcome = tuple(outcome)
            (mixed_probes if mixed else agreeing).append(probe)
        return GroupCounts(), records, self._queue_mixed(mixed_probes) + self._complete_worthwhile(agreeing)

    def _short(self) -> float | None:
        """Informative groups the batch still misses once the pending completions are counted (None: a fixed budget,
        which completes whatever it can pay for)."""
        if self.carrying:  # the next step's batch: completions beyond its groups would be surplus
            return self.target - sum(probe.chance for probe in self.pending)
        if self.fixed_budget:
            return None
        return self.target - self._kept_groups() - sum(probe.chance for probe in self.pending)

    def _queue_mixed(self, mixed: list[Probe]) -> list[Probe]:
        """Queue mixed prompts for completion; when filling the batch, only as many as it still misses (a mixed
        prompt is informative at G for sure: completing more would pay ``G - k`` each for surplus groups). Returns
        the others, to be dropped at their probes' cost."""
        short = self._short()
        take = len(mixed) if short is None else max(math.ceil(short - 1e-9), 0)
        self.pending.extend(mixed[:take])
        return mixed[take:]

    def _complete_worthwhile(self, agreeing: list[Probe]) -> list[Probe]:
        """Queue the agreeing prompts worth completing (after the mixed ones); return the others, to be dropped.

        Completing one buys an informative group with chance ``c`` (its stratum's and direction's estimate) for
        ``G - k`` completions. It is worth it when that rate reaches the stream's: the informative groups per
        completion of the best use of new prompts (screening them, round latency included; Dinkelbach's rule for a
        ratio objective, see `screening.stream_rate`). Under a fixed budget a completion not worth it is not
        generated (the budget is a cap); when filling the batch, only as many are completed as it still misses, best
        first. A seeded share (`EXPLORE_SHARE`) is completed whatever its estimate.
        """
        if not agreeing:
            return []
        args, estimates = self.trainer.args, self.sampler.screening
        G, k = self.num_generations, self.probe_size
        latency = args.dynamic_sampling_round_latency
        opportunity = stream_rate(estimates.retention(), estimates.mixed_rate(), k, G, latency, self.target)
        candidates = []
        for probe in agreeing:
            direction = _DIRECTIONS.get(probe.outcome[0])
            if direction is None:  # zero-variance elsewhere (too few scorable members): nothing to learn from
                continue
            chance = estimates.after_agreement(probe.stratum, direction)
            explore = self._coin(probe.index) < EXPLORE_SHARE
            if explore or worth_completing(chance, k, G, opportunity):
                candidates.append((not explore, -chance, len(candidates), probe, direction, chance))
        short = self._short()  # filling the batch: completions beyond what it misses would be surplus
        completed = set()
        for _, _, _, probe, direction, chance in sorted(candidates):  # explored first, then best first
            if short is not None and short <= 0:
                break
            probe.agreed, probe.chance = direction, chance
            self.pending.append(probe)
            completed.add(id(probe))
            if short is not None:
                short -= chance
        return [probe for probe in agreeing if id(probe) not in completed]

    def _coin(self, index: int) -> float:
        """A uniform draw keyed by the run's seed, the step and the prompt: the same on every process and on resume."""
        return random.Random(f"{self.trainer.args.seed}/{self.sampler.step}/{index}").random()

    def _per_group(self, classified) -> tuple[list[int], list[int], list[int]]:
        return [int(o) for o in classified.outcomes], classified.upper, classified.scorable

    def _keep(self, groups, classified, prompts, observed) -> GroupCounts:
        """Keep the informative groups the batch still needs; the rest are surplus or fill candidates."""
        kept_before = self._kept_groups()
        informative = classified.informative.tolist()
        take = [i for i, flag in enumerate(informative) if flag][: max(self.target - kept_before, 0)]
        for i in take:
            self.kept.extend(groups[i])
        self.fill_pool.extend(
            [replace(part, filled=True) for part in group] for group, flag in zip(groups, informative) if not flag
        )
        for prompt, outcome, upper, scorable in zip(prompts, *self._per_group(classified)):
            observed.append((prompt.index, outcome, upper, scorable))
        outcomes = classified.outcomes
        return GroupCounts(
            attempted=len(groups),
            informative=sum(informative),
            surplus=sum(informative) - len(take),
            all_max=outcomes.count(GroupOutcome.ALL_MAX),
            all_min=outcomes.count(GroupOutcome.ALL_MIN),
            other=outcomes.count(GroupOutcome.OTHER),
        )

    def _drop(self, probes: list[Probe]) -> list[tuple[int, int, int, int]]:
        """Probes not completed: kept as fill material (repeated to a group, masked); returns what the prompt
        history learns from each (its probes' outcome), for the caller to gather and count."""
        if self.units_to_complete:
            self.fill_pool.extend(probe.as_fill_group(self.num_generations) for probe in probes)
        return [(probe.index, *probe.outcome) for probe in probes]

    def _generate(self, rows: list[dict[str, Any]]):
        """One TRL round whose groups are ``k`` rows (so every backend sees one prompt per ``k`` rows)."""
        trainer = self.trainer
        trainer.num_generations = self.probe_size
        try:
            output, scored = trainer._scored_round(rows)
        finally:
            trainer.num_generations = self.num_generations
        if self.pipeline and not trainer.carried_logps_only:  # every row: a carried one is trained next step
            trainer._record_old_logps(output)
        return output, scored

    def _gather_round(self, counts, dropped, observed, probe_records, agreeing_records, groups, round_index) -> None:
        """Every process's counts of the round: step totals, the funnel, the history and the screening estimates."""
        accelerator = self.trainer.accelerator
        local = torch.tensor([self._kept_groups(), *counts, len(probe_records), dropped], device=accelerator.device)
        gathered = accelerator.gather(local).view(accelerator.num_processes, -1).cpu()
        self.kept_per_process = gathered[:, 0].tolist()
        self.totals = added(self.totals, GroupCounts(*(int(v) for v in gathered[:, 1:-2].sum(dim=0))))
        screened_all, dropped_all = (int(v) for v in gathered[:, -2:].sum(dim=0))
        self.funnel[0] += screened_all
        self.funnel[1] += dropped_all
        every_probe, every_agreeing, every = (
            [item for part in gather_object([records]) for item in part]
            for records in (probe_records, agreeing_records, observed)
        )
        if every_probe:
            self.sampler.screening.observe_probes(*(list(column) for column in zip(*every_probe)))
        if every_agreeing:
            self.sampler.screening.observe_completions(*(list(column) for column in zip(*every_agreeing)))
        if every:
            self.sampler.observe_groups(*(list(column) for column in zip(*every)))
        if self.trainer.args.diagnostics:
            rewards = [torch.cat([p.rewards_per_func for p in group]).cpu() for group in groups]
            gathered_rewards = [r for part in gather_object([rewards]) for r in part]
            if gathered_rewards:
                self.attempted_rewards.append(torch.cat(gathered_rewards))
        self._show_progress(round_index)

    # ------------------------------------------------------------------------------------------------ the batch

    def _finish(self) -> dict[str, torch.Tensor | Any]:
        """Mask fill groups into what the informative groups leave free (a fixed budget expects to; otherwise as
        ``dynamic_sampling_on_exhausted`` says), assemble the batch and log the step."""
        if self.trainer.args.diagnostics and not self.attempted_rewards:  # no group was completed this step
            fillers = self.fill_pool[: max(self._missing_groups(), 0)]
            self.attempted_rewards.append(
                self.trainer.accelerator.gather(torch.cat([p.rewards_per_func for p in self.kept + sum(fillers, [])]))
            )
        return self._complete_batch(self.fill_pool, expected=self.fixed_budget)

    def _generated_completions(self) -> int:
        return self.generated_rows

    def _extra_step_metrics(self) -> dict[str, float]:
        if not self.units_to_complete:
            return {}
        screened, dropped = self.funnel
        informative = self.totals.informative
        return {
            **self._pipeline_metrics(),
            N.DYNAMIC_SAMPLING_SCREENED_PROMPTS: screened,
            N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS: self.totals.attempted,
            N.DYNAMIC_SAMPLING_DROPPED_PROMPTS: dropped,
            N.DYNAMIC_SAMPLING_STRANDED_PROBES: self.stranded,
            N.DYNAMIC_SAMPLING_COMPLETIONS_PER_INFORMATIVE_GROUP: (
                self.generated_rows / informative if informative else float("nan")
            ),
        }

    def _pipeline_metrics(self) -> dict[str, float]:
        """Pipelined screening: the probes handed on or dropped, and the share of trained rows from the previous
        step's call (one step off-policy)."""
        if not self.pipeline:
            return {}
        stale = sum(len(part.origin) for part in self.kept if part.origin[0][0] == CARRIED_ROUND)
        trained = sum(len(part.origin) for part in self.kept)
        stale, trained = (sum(column) for column in self._gathered_columns(stale, trained))
        return {
            N.DYNAMIC_SAMPLING_CARRIED_PROBES: self.carried_out,
            N.DYNAMIC_SAMPLING_CARRY_DROPPED_PROBES: self.carry_dropped,
            N.DYNAMIC_SAMPLING_STALE_ROW_SHARE: stale / trained if trained else float("nan"),
        }
