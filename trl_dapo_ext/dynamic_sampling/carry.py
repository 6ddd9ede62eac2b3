"""Pipelined screening (``dynamic_sampling_pipeline``): the probes one step's generation call hands to the next step.

Under the fixed budget, a pipelined step makes one generation call: the ``G - k`` completions of the prompts whose
probes the previous call made, and the ``k`` probes of the prompts the next step will complete (SPEED-RL's single
inference batch, arXiv 2506.09016). What crosses the step boundary is a :class:`CarriedRound`: the carried probes'
rows as one round of their own (round 0 of the next step: its rows keep their tensors, rewards, lengths and
completions-table entries), and what the screening collector knew of each prompt (dataset row and index, stratum,
and for an agreeing prompt its direction and chance). The rows' ``old_per_token_logps`` were computed in their own
call, under the policy that generated them, so the next step's loss clips them as one step off-policy.

The sampler holds the carry between steps (``DynamicSampler.carried``) and `state` writes it into each checkpoint
(:func:`CarriedRound.state_dict`, one file per process), so that a resumed run completes the same probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object

from .assembly import RoundRows, ScoredRound, concat_rows

CARRIED_ROUND = 0  # the round index of the carried rows in the step that completes them (its own rounds count from 1)
PROBE_FIELDS = ("row", "index", "stratum", "agreed", "chance", "outcome")


@dataclass
class CarriedRound:
    """Probes of step ``step``'s last call whose completion is the next step's: their rows and what was learnt."""

    cycle: int  # the generation cycle whose call made the probes (`state.generation_cycle`; the step by default)
    rows: RoundRows  # the probes' rows, ``k`` per prompt, in prompt order, as round `CARRIED_ROUND`
    probes: list[dict[str, Any]]  # per prompt: PROBE_FIELDS
    logs: dict[str, Any] | None  # the rows' completions-table entries (log_completions), in row order

    @property
    def probe_size(self) -> int:
        return len(self.rows.scored.completion_ids) // max(len(self.probes), 1)

    def state_dict(self) -> dict[str, Any]:
        """Tensors, lists and plain values only (``torch.load(weights_only=True)`` reads it back)."""
        scored = self.rows.scored
        return {
            "cycle": self.cycle,
            "output": dict(self.rows.output),
            "rewards": self.rows.local_rewards,
            "completion_ids": scored.completion_ids,
            "lengths": scored.lengths,
            "truncated": scored.truncated,
            "probes": [{**probe, "outcome": list(probe["outcome"])} for probe in self.probes],
            "logs": self.logs,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CarriedRound:
        probes = [{**probe, "outcome": tuple(probe["outcome"])} for probe in state["probes"]]
        rows = carried_rows(
            state["output"], state["rewards"], state["completion_ids"], state["lengths"], state["truncated"]
        )
        return cls(cycle=int(state["cycle"]), rows=rows, probes=probes, logs=state["logs"])


def carried_rows(output, rewards, completion_ids, lengths, truncated) -> RoundRows:
    """The carried rows as one round (`CARRIED_ROUND`) of the step that completes them."""
    scored = ScoredRound(rewards_per_func=rewards, completion_ids=completion_ids, lengths=lengths, truncated=truncated)
    return RoundRows(output, scored, rewards, CARRIED_ROUND, local_count=len(completion_ids))


def carry_round(
    probes: list[Any], cycle: int, pad_token_id: int, round_logs: dict[int, dict] | None, process_index: int = 0
) -> CarriedRound:
    """The `CarriedRound` of ``probes`` (`screening_rounds.Probe`, each with its own round's rows) made in
    generation cycle ``cycle`` on process ``process_index``; ``round_logs``: the step's completions-table buffers per round, every
    process's rows (None: not logged)."""
    parts = [probe.part() for probe in probes]
    output = concat_rows([part.batch for part in parts], pad_token_id=pad_token_id)
    rows = carried_rows(
        output,
        torch.cat([part.rewards_per_func for part in parts]),
        [ids for part in parts for ids in part.completion_ids],
        torch.cat([part.lengths for part in parts]),
        torch.cat([part.truncated for part in parts]),
    )
    metadata = [{name: getattr(probe, name) for name in PROBE_FIELDS} for probe in probes]
    origins = [origin for part in parts for origin in part.origin]
    logs = None if round_logs is None else _carried_logs(origins, round_logs, process_index)
    return CarriedRound(cycle=cycle, rows=rows, probes=metadata, logs=logs)


def _carried_logs(origins: list[tuple[int, int, int]], round_logs: dict[int, dict], process_index: int) -> dict:
    """This process's carried rows' completions-table entries, in row order (a round's buffers hold every
    process's rows: process ``p``'s row ``i`` of a round of ``n`` rows per process is entry ``p * n + i``)."""
    logs: dict[str, Any] = {"prompt": [], "completion": [], "extra": {}}
    for row, (round_index, local_count, local_row) in enumerate(origins):
        source, index = round_logs[round_index], process_index * local_count + local_row
        logs["prompt"].append(source["prompt"][index])
        logs["completion"].append(source["completion"][index])
        for column, values in source["extra"].items():
            logs["extra"].setdefault(column, [None] * row)
            logs["extra"][column].append(values[index] if index < len(values) else None)
        for values in logs["extra"].values():
            values.extend([None] * (row + 1 - len(values)))
    return logs


def shared_logs(local_logs: dict[str, Any] | None, local_rows: int = 0) -> tuple[dict[str, Any], int]:
    """Every process's carried completions-table entries as one round's buffers, and the round's rows per process
    (the longest process's; shorter ones padded with None): process ``p``'s carried row ``i`` is entry
    ``p * stride + i``, where `assembly.rebuild_completion_logs` looks for it. ``local_rows``: this process's carried
    rows, shown as None where their entries were not kept (a checkpoint written without them). Call it on every
    process."""
    if local_logs is None:
        local_logs = {"prompt": [None] * local_rows, "completion": [None] * local_rows, "extra": {}}
    parts = gather_object([local_logs])
    stride = max(len(part["prompt"]) for part in parts)
    columns = sorted({column for part in parts for column in part["extra"]})
    logs: dict[str, Any] = {"prompt": [], "completion": [], "extra": {column: [] for column in columns}}
    for part in parts:
        count = len(part["prompt"])
        padding = [None] * (stride - count)
        logs["prompt"] += part["prompt"] + padding
        logs["completion"] += part["completion"] + padding
        for column in columns:
            logs["extra"][column] += part["extra"].get(column, [None] * count) + padding
    return logs, stride
