"""Dynamic sampling with refill (DAPO Sec. 3.2), used only by `DAPOTrainer`.

* `rounds`: the round loop (generate, score, keep informative groups, stop or ask for more);
* `planner`: how large the next round is (the round-cost model, retention estimates, the budget);
* `history`: prompt-history skipping with an exploration floor;
* `stream`: the rank-consistent, checkpointable refill prompt stream;
* `assembly`: whole groups across rounds into one update batch, and TRL's batch metrics recomputed on it;
* `state`: what a checkpoint saves and restores.

The pure modules (`planner`, `history`, `stream`) import neither trl nor transformers; the names below are imported
on first use (PEP 562), so importing one of them does not import the trainer's side.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

_EXPORTS: dict[str, str] = {
    "PROMPT_INDEX_COLUMN": ".rounds",
    "DynamicSamplingExhausted": ".rounds",
    "DynamicSamplingMixin": ".rounds",
    "REFILL_STATE_FILE": ".state",
    "refill_state_file": ".state",
}

__all__ = [
    "PROMPT_INDEX_COLUMN",
    "REFILL_STATE_FILE",
    "DynamicSamplingExhausted",
    "DynamicSamplingMixin",
    "refill_state_file",
]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .rounds import PROMPT_INDEX_COLUMN, DynamicSamplingExhausted, DynamicSamplingMixin
    from .state import REFILL_STATE_FILE, refill_state_file
