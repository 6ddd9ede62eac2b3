"""Ctrl-C in `trl-dapo train` and `trl-dapo demo`: save the stage in progress, say where, exit with status 130.

Both commands wrap each ``trainer.train()`` in :func:`save_on_interrupt`. On Ctrl-C it saves the model and
``trainer_state.json`` into the stage's ``interrupted`` folder and raises :class:`RunInterrupted` with the message
to print; a Ctrl-C outside a training stage is a plain ``KeyboardInterrupt``, reported by :func:`report_interrupt` as
"nothing was saved". 130 is the shell's status for a process ended by SIGINT (128 + 2).

Example:
    >>> report_interrupt(KeyboardInterrupt(), "trl-dapo train")  # doctest: +SKIP
    trl-dapo train: interrupted before training started: nothing was saved
    130
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERRUPTED = 130
INTERRUPTED_DIR = "interrupted"


class RunInterrupted(Exception):
    """Ctrl-C during a training stage, after what could be saved was saved; ``str()`` says what and where."""

    def __init__(self, message: str, folder: str | None):
        super().__init__(message)
        self.folder = folder


def save_interrupted(trainer: Any, folder: str) -> str:
    """Save ``trainer``'s model (its adapter with PEFT) and trainer state into ``folder``; return what to print.

    The state file is the one `trl-dapo report FOLDER` reads. A second Ctrl-C while saving is reported as such.
    """
    step = trainer.state.global_step
    try:
        trainer.save_model(folder)  # every process calls it (DeepSpeed gathers the weights); the main one writes
        if trainer.is_world_process_zero():
            trainer.state.save_to_json(os.path.join(folder, "trainer_state.json"))
    except KeyboardInterrupt:
        return f"interrupted again while saving: {folder} may be incomplete"
    return (
        f"interrupted during step {step + 1}: the model after {step} completed step{'' if step == 1 else 's'} and "
        f"the trainer state are saved in {folder} (trl-dapo report {folder} draws its dashboard)"
    )


@contextmanager
def save_on_interrupt(trainer: Any, folder: str) -> Iterator[None]:
    """Run the block (``trainer.train()``); on Ctrl-C save into ``folder`` and raise :class:`RunInterrupted`."""
    try:
        yield
    except KeyboardInterrupt:
        raise RunInterrupted(save_interrupted(trainer, folder), folder) from None


def report_interrupt(error: BaseException, prog: str, nothing_saved: str = "nothing was saved") -> int:
    """Print one line for a Ctrl-C on stderr and return :data:`INTERRUPTED` (130).

    ``error`` is a :class:`RunInterrupted` (its message says what was saved) or a bare ``KeyboardInterrupt`` (then
    ``nothing_saved`` says so).
    """
    message = str(error) if isinstance(error, RunInterrupted) else f"interrupted: {nothing_saved}"
    print(f"\n{prog}: {message}", file=sys.stderr, flush=True)
    return INTERRUPTED
