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

from .assembly import RoundRows, ScoredRound, concat_rows

CARRIED_ROUND = 0  # the round index of the carried rows in the step that completes them (its own rounds count from 1)
PROBE_FIELDS = ("row", "index", "stratum", "agreed", "chance", "outcome")


@dataclass
class CarriedRound:
    """Probes of step ``step``'s last call whose completion is the next step's: their rows and what was learnt."""

    step: int  # the global step (before it) whose call generated the probes
    rows: RoundRows  # the probes' rows, ``k`` per prompt, in prompt order, as round `CARRIED_ROUND`
    probes: list[dict[str, Any]]  # per prompt: PROBE_FIELDS
    logs: dict[str, Any] | None  # the rows' completions-table entries (log_completions), in row order

    @property
    def probe_size(self) -> int:
        return self.rows.local_count // max(len(self.probes), 1)

    def state_dict(self) -> dict[str, Any]:
        """Tensors, lists and plain values only (``torch.load(weights_only=True)`` reads it back)."""
        scored = self.rows.scored
        return {
            "step": self.step,
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
        return cls(step=int(state["step"]), rows=rows, probes=probes, logs=state["logs"])


def carried_rows(output, rewards, completion_ids, lengths, truncated) -> RoundRows:
    """The carried rows as one round (`CARRIED_ROUND`) of the step that completes them."""
    scored = ScoredRound(rewards_per_func=rewards, completion_ids=completion_ids, lengths=lengths, truncated=truncated)
    return RoundRows(output, scored, rewards, CARRIED_ROUND, local_count=len(completion_ids))


def carry_round(probes: list[Any], step: int, pad_token_id: int, round_logs: dict[int, dict] | None) -> CarriedRound:
    """The `CarriedRound` of ``probes`` (`screening_rounds.Probe`, each with its own round's rows) made in step
    ``step``; ``round_logs``: the step's completions-table buffers per round (None: not logged)."""
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
    logs = None if round_logs is None else _carried_logs([o for part in parts for o in part.origin], round_logs)
    return CarriedRound(step=step, rows=rows, probes=metadata, logs=logs)


def _carried_logs(origins: list[tuple[int, int, int]], round_logs: dict[int, dict]) -> dict[str, Any]:
    """The completions-table entries of the carried rows (one process: a round's row ``i`` is its entry ``i``)."""
    logs: dict[str, Any] = {"prompt": [], "completion": [], "extra": {}}
    for row, (round_index, _, local_row) in enumerate(origins):
        source = round_logs[round_index]
        logs["prompt"].append(source["prompt"][local_row])
        logs["completion"].append(source["completion"][local_row])
        for column, values in source["extra"].items():
            logs["extra"].setdefault(column, [None] * row)
            logs["extra"][column].append(values[local_row] if local_row < len(values) else None)
        for values in logs["extra"].values():
            values.extend([None] * (row + 1 - len(values)))
    return logs
