"""The per-prompt table that ``trl-dapo profile`` writes and ``dynamic_sampling_history_from`` reads: its row,
its JSON-lines file, and how a row seeds the prompt history (`history`) before the first step.

It sits here, below both: the profile (``preflight.difficulty``, ``cli/profile.py``) computes the rows, dynamic
sampling reads them back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.groups import GroupOutcome
from .history import PromptHistory


@dataclass(frozen=True)
class PromptStats:
    """One prompt of the profile table (``index`` is its row in the dataset)."""

    index: int
    samples: int
    passed: int
    pass_rate: float
    mean_reward: float | None
    reward_std: float | None
    zero_variance: float  # probability that a group of G is zero-variance
    mean_length: float
    truncated: float  # share of completions that hit max_completion_length
    binary: bool


def seed_history(history: PromptHistory, stats: Sequence[PromptStats | dict[str, Any]]) -> None:
    """Record the profile in a prompt history, as if each prompt had been trained on once.

    Each prompt's outcome (informative, all passed, none passed) and its tally (passed of samples) feed the planner's
    strata and prompt-history skipping from the first step (``dynamic_sampling_history_from``).

    >>> history = PromptHistory(generations=4)
    >>> row = PromptStats(7, samples=4, passed=4, pass_rate=1.0, mean_reward=1.0, reward_std=0.0, zero_variance=1.0,
    ...                   mean_length=2.0, truncated=0.0, binary=True)
    >>> seed_history(history, [row])
    >>> history.outcomes, history.stratum(7)
    ({7: 'H'}, 'predicted 0.2-0.3')
    """
    indices, outcomes, upper, scorable = [], [], [], []
    for item in stats:
        s = PromptStats(**item) if isinstance(item, dict) else item
        if s.samples == 0:
            continue
        if s.reward_std is not None and s.reward_std > 0:
            outcome = GroupOutcome.INFORMATIVE
        elif s.passed == s.samples:
            outcome = GroupOutcome.ALL_MAX
        elif s.passed == 0:
            outcome = GroupOutcome.ALL_MIN
        else:
            outcome = GroupOutcome.OTHER
        indices.append(s.index)
        outcomes.append(outcome)
        upper.append(s.passed if s.binary else -1)  # the tally counts upper-half completions: binary only
        scorable.append(s.samples)
    history.record(indices, outcomes, upper=upper, scorable=scorable)


def write_table(path: str | Path, stats: Sequence[PromptStats]) -> None:
    """The per-prompt table as JSON lines (one :class:`PromptStats` per line)."""
    with open(path, "w") as handle:
        for s in stats:
            handle.write(json.dumps(asdict(s)) + "\n")


def read_table(path: str | Path) -> list[PromptStats]:
    """The per-prompt table written by :func:`write_table` (``trl-dapo profile``'s ``prompts.jsonl``).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "prompts.jsonl")
    >>> write_table(path, [PromptStats(3, 2, 1, 0.5, 0.5, 0.5, 0.5, 2.0, 0.0, True)])
    >>> read_table(path)[0].pass_rate
    0.5
    """
    rows = []
    fields = set(PromptStats.__dataclass_fields__)
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                rows.append(PromptStats(**{k: record[k] for k in fields}))
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number} is not a trl-dapo profile row ({error})") from None
    return rows
