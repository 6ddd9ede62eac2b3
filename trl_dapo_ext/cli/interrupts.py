"""Ctrl-C in `trl-dapo train` and `trl-dapo demo`: save a checkpoint the run can resume from, say where, exit 130.

Both commands wrap each ``trainer.train()`` in :func:`save_on_interrupt`. The first Ctrl-C does not stop the step
in progress (a step cut in the middle leaves the model, the optimizer, the RNG and the refill stream at different
points, which no checkpoint can resume exactly): the step finishes, then the Trainer saves a full checkpoint
(``output_dir/checkpoint-N``, what ``Trainer._save_checkpoint`` saves: model, optimizer, scheduler, RNG state, trainer
state, and with `DAPOTrainer` the refill state) and stops, and :class:`RunInterrupted` carries the folder to resume
from. A second Ctrl-C stops at once and saves what is consistent mid-step, the model and ``trainer_state.json``, into
the stage's ``interrupted`` folder (not resumable: there is no optimizer state). A Ctrl-C outside a training stage is
a plain ``KeyboardInterrupt``, reported by :func:`report_interrupt` as "nothing was saved". 130 is the shell's status
for a process ended by SIGINT (128 + 2).

Example:
    >>> report_interrupt(KeyboardInterrupt(), "trl-dapo train")  # doctest: +SKIP
    trl-dapo train: interrupted before training started: nothing was saved
    130
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERRUPTED = 130
INTERRUPTED_DIR = "interrupted"


class RunInterrupted(Exception):
    """Ctrl-C during a training stage, after what could be saved was saved; ``str()`` says what and where.

    ``resumable``: ``folder`` is a full checkpoint (``--resume_from_checkpoint folder`` continues the run exactly).
    """

    def __init__(self, message: str, folder: str | None, resumable: bool = False):
        super().__init__(message)
        self.folder = folder
        self.resumable = resumable


def stop_at_step_end(trainer: Any) -> Any:
    """A `TrainerCallback` that, once Ctrl-C was pressed on any process (its ``requested``), asks the Trainer to save
    a full checkpoint and stop at the end of the step."""
    from transformers import TrainerCallback  # here, not at the top: `trl-dapo demo --help` imports no torch

    class StopAtStepEnd(TrainerCallback):
        requested = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if _requested_anywhere(trainer, self.requested):
                self.requested = True
                args.save_only_model = False  # the optimizer, scheduler and RNG state too (the demo saves models only)
                control.should_save = True
                # Log the steps since the last log: the metrics of a run are kept in memory until logged, and the
                # resumed run would not have them.
                control.should_log = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            # Stop only once saved: the checkpoint records the Trainer's control flags, and one saved with
            # should_training_stop set would end the resumed run at once.
            if self.requested:
                control.should_training_stop = True
            return control

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.requested:
                control.should_save = False  # saved at the step's end already (save_strategy epoch would save again)
            return control

    return StopAtStepEnd()


def _requested_anywhere(trainer: Any, requested: bool) -> bool:
    """Whether any process saw Ctrl-C: every process must stop at the same step, or the others wait forever in the
    next collective."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes <= 1:
        return requested
    import torch

    flag = torch.tensor([float(requested)], device=accelerator.device)
    return bool(accelerator.reduce(flag, reduction="sum").item() > 0)


def save_interrupted(trainer: Any, folder: str) -> str:
    """Save ``trainer``'s model (its adapter with PEFT) and trainer state into ``folder``; return what to print.

    The state file is the one `trl-dapo report FOLDER` reads. A further Ctrl-C while saving is reported as such.
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
        f"the trainer state are saved in {folder} (no optimizer state: not a checkpoint to resume from; "
        f"trl-dapo report {folder} draws its dashboard)"
    )


def _checkpoint_message(trainer: Any) -> tuple[str, str]:
    step = trainer.state.global_step
    folder = os.path.join(trainer.args.output_dir, f"checkpoint-{step}")
    return folder, (
        f"interrupted: stopped after step {step} and saved a full checkpoint in {folder} (model, optimizer, scheduler, "
        f"RNG and refill state; trl-dapo report {folder} draws its dashboard)"
    )


@contextmanager
def _first_ctrl_c_requests(callback: Any) -> Iterator[None]:
    """While the block runs, the first SIGINT sets ``callback.requested``; the next raises ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread: Ctrl-C stops at once there
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if callback.requested:
            raise KeyboardInterrupt
        callback.requested = True
        # os.write, not print: a handler that interrupts a print to the same stream would fail as re-entrant.
        os.write(
            sys.__stderr__.fileno() if sys.__stderr__ else 2,
            b"\nCtrl-C: finishing this step, then saving a checkpoint to resume from (Ctrl-C again: stop now, "
            b"model only)\n",
        )

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def save_on_interrupt(trainer: Any, folder: str) -> Iterator[None]:
    """Run the block (``trainer.train()``) so that Ctrl-C saves and raises :class:`RunInterrupted`.

    The first Ctrl-C: a full checkpoint after the step in progress (``resumable``); a second one: the model and trainer
    state in ``folder`` at once. A Ctrl-C during the last step lets the run finish normally.
    """
    callback = stop_at_step_end(trainer)
    trainer.add_callback(callback)
    try:
        with _first_ctrl_c_requests(callback):
            yield
    except KeyboardInterrupt:
        raise RunInterrupted(save_interrupted(trainer, folder), folder) from None
    finally:
        trainer.remove_callback(callback)
    if callback.requested and trainer.state.global_step < trainer.state.max_steps:
        checkpoint, message = _checkpoint_message(trainer)
        raise RunInterrupted(message, checkpoint, resumable=True)


def report_interrupt(error: BaseException, prog: str, nothing_saved: str = "nothing was saved") -> int:
    """Print one line for a Ctrl-C on stderr and return :data:`INTERRUPTED` (130).

    ``error`` is a :class:`RunInterrupted` (its message says what was saved) or a bare ``KeyboardInterrupt`` (then
    ``nothing_saved`` says so).
    """
    message = str(error) if isinstance(error, RunInterrupted) else f"interrupted: {nothing_saved}"
    print(f"\n{prog}: {message}", file=sys.stderr, flush=True)
    return INTERRUPTED


def resume_command(prog: str, argv: list[str] | None, flag: str, value: str | None = None) -> str:
    """The command line that resumes this run: the same arguments, ``flag`` (with ``value``, if given) replaced.

    >>> resume_command("trl-dapo train", ["--config", "r.yaml", "--resume_from_checkpoint", "old"],
    ...                "--resume_from_checkpoint", "runs/x/checkpoint-4")
    'trl-dapo train --config r.yaml --resume_from_checkpoint runs/x/checkpoint-4'
    >>> resume_command("trl-dapo demo", ["--quick", "--resume"], "--resume")
    'trl-dapo demo --quick --resume'
    """
    kept, skip = [], False
    for item in sys.argv[1:] if argv is None else argv:
        if skip:
            skip = False
        elif item == flag:
            skip = value is not None  # the flag's old value follows it
        elif not item.startswith(f"{flag}="):
            kept.append(item)
    return shlex.join([*prog.split(), *kept, flag, *([] if value is None else [value])])
