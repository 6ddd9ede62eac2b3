"""What a checkpoint saves and restores of dynamic sampling: the state that steers refill, one JSON file per process,
and the rest of the generation batch when the checkpoint falls inside a generation cycle.

`DAPOTrainer` calls :func:`save_dynamic_sampling` from ``_save_rng_state`` and :func:`resume_dynamic_sampling` from
``train``; both read and set TRL's micro-step count ``_step`` and buffer ``_buffered_inputs`` (listed in `compat.py`).

The refill stream's position, the planner's estimates, the reward range seen so far and the prompt history are
written beside each process's RNG state (``rng_state_{i}.pth``) in every checkpoint and read back on resume, so a
resumed run draws the same refill prompts and sizes its rounds as the uninterrupted run would have.

With ``steps_per_generation > 1`` (or ``num_iterations > 1``) one generation batch serves several optimizer steps.
TRL keeps its micro-batches in memory only and counts micro-steps from 0 again after a resume, so a run resumed
inside a cycle would generate a fresh batch for the dataloader's current prompts (their rounds and refill draws
repeated) and from then on generate at other steps than the uninterrupted run (the refill stream shifted). So the
checkpoint also holds TRL's micro-step count and, inside a cycle, the buffered micro-batches
(``dapo_generation_buffer.pt``, one per process, about the size of one generation batch's tensors); the resumed run
trains the rest of the very batch the interrupted run generated and then generates where it would have.

With pipelined screening (``dynamic_sampling_pipeline``) the probes a step made for the next one (`carry`: their
rows, old log-probabilities, rewards and what screening knew of each prompt) are written beside the state too
(``dapo_carried_probes.pt``, one per process), so the resumed run completes the very probes the interrupted run made.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import torch
from accelerate.utils import send_to_device
from transformers.trainer_utils import get_last_checkpoint

from .carry import CarriedRound

REFILL_STATE_FILE = "dapo_refill_state.json"
GENERATION_BUFFER_FILE = "dapo_generation_buffer.pt"
CARRY_FILE = "dapo_carried_probes.pt"


def refill_state_file(process_index: int, world_size: int, name: str = REFILL_STATE_FILE) -> str:
    """Name of a process's refill-state file (or another per-process ``name``) in a checkpoint, following the RNG
    state's (``rng_state_{i}.pth``).

    Example:
        >>> refill_state_file(0, 1), refill_state_file(3, 4), refill_state_file(3, 4, GENERATION_BUFFER_FILE)
        ('dapo_refill_state.json', 'dapo_refill_state_3.json', 'dapo_generation_buffer_3.pt')
    """
    stem, extension = os.path.splitext(name)
    return name if world_size <= 1 else f"{stem}_{process_index}{extension}"


def _replace_atomically(path: str, write) -> None:
    """``write(partial_path)``, then move the result to ``path``: an interrupted write leaves nothing behind."""
    partial = f"{path}.partial"
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise


def micro_steps_per_cycle(args: Any) -> int:
    """Micro-steps per generation cycle: TRL generates when its micro-step count is a multiple of this."""
    return args.steps_per_generation * args.num_iterations


def generation_cycle(trainer: Any) -> int:
    """The generation cycle the trainer is in (0 first): its micro-step count over `micro_steps_per_cycle`."""
    return trainer._step // micro_steps_per_cycle(trainer.args)


def save_dynamic_sampling(trainer: Any, folder: str) -> str:
    """Write this process's refill state into a checkpoint ``folder`` (and, inside a generation cycle, the rest of
    the generation batch); return the state file's path.

    The state is the trainer's `DynamicSampler` state dict plus TRL's micro-step count, which places the run in its
    generation cycle. Every process writes its own file (the states agree: each is built from gathered values), so
    every node of a run finds one beside its own RNG state, whether or not the checkpoint folder is shared. Written
    to a temporary name first, so an interrupted write never leaves a truncated state behind; errors propagate.
    """
    args = trainer.args
    path = os.path.join(folder, refill_state_file(args.process_index, args.world_size))
    state = {**trainer.dynamic_sampling.state_dict(), "micro_step": trainer._step}

    def write_state(partial: str) -> None:
        with open(partial, "w") as handle:
            json.dump(state, handle)

    _replace_atomically(path, write_state)
    carried = trainer.dynamic_sampling.carried
    if carried is not None:
        carry_path = os.path.join(folder, refill_state_file(args.process_index, args.world_size, CARRY_FILE))
        _replace_atomically(carry_path, lambda partial: torch.save(carried.state_dict(), partial))
    # Inside a generation cycle TRL's next micro-step trains a buffered micro-batch instead of generating: the rest
    # of this batch is trained after the checkpoint.
    if trainer._step % micro_steps_per_cycle(args) != 0 and trainer._buffered_inputs is not None:
        buffer = os.path.join(folder, refill_state_file(args.process_index, args.world_size, GENERATION_BUFFER_FILE))
        _replace_atomically(buffer, lambda partial: torch.save(trainer._buffered_inputs, partial))
    return path


def resume_dynamic_sampling(trainer: Any, resume_from_checkpoint: str | bool) -> None:
    """Load this process's refill state from the checkpoint ``train`` resumes from; warn when it has none."""
    args = trainer.args
    checkpoint = resume_from_checkpoint
    if checkpoint is True:
        checkpoint = get_last_checkpoint(args.output_dir)
    name = refill_state_file(args.process_index, args.world_size)
    state_file = os.path.join(checkpoint, name) if checkpoint else None
    if state_file and os.path.isfile(state_file):
        with open(state_file) as handle:
            state = json.load(handle)
        trainer.dynamic_sampling.load_state_dict(state)
        _resume_carry(trainer, checkpoint)
        _resume_generation_cycle(trainer, checkpoint, state.get("micro_step"))
    else:
        warnings.warn(
            f"resuming from {checkpoint} without {name}: the refill stream restarts from the beginning "
            "(refill prompts may repeat) and the round planner and prompt history start empty.",
            stacklevel=3,
        )


def _resume_carry(trainer: Any, checkpoint: str) -> None:
    """Pipelined screening: the probes the checkpointed step handed on (none: the next step starts unpipelined)."""
    args = trainer.args
    path = os.path.join(checkpoint, refill_state_file(args.process_index, args.world_size, CARRY_FILE))
    if os.path.isfile(path):
        state = _load_tensors(path, trainer.accelerator.device)
        trainer.dynamic_sampling.carried = CarriedRound.from_state(state)


def _resume_generation_cycle(trainer: Any, checkpoint: str, micro_step: int | None) -> None:
    """Put TRL's micro-step count back, and inside a generation cycle the rest of the batch, so that the resumed
    run trains the micro-batches and generates at the steps the uninterrupted run did."""
    if micro_step is None:  # a checkpoint from before the count was saved: TRL's own resume (count from 0)
        return
    args = trainer.args
    trainer._step = int(micro_step)
    if trainer._step % micro_steps_per_cycle(args) == 0:
        return  # at a cycle's start: the next micro-step generates anyway
    name = refill_state_file(args.process_index, args.world_size, GENERATION_BUFFER_FILE)
    path = os.path.join(checkpoint, name)
    if os.path.isfile(path):
        trainer._buffered_inputs = _load_tensors(path, trainer.accelerator.device)
    else:
        warnings.warn(
            f"resuming inside a generation cycle from {checkpoint} without {name}: the rest of the cycle trains "
            "on a freshly generated batch of the same prompts, with other refill draws than the interrupted run's "
            "(the later cycles start at the same steps).",
            stacklevel=4,
        )


def _load_tensors(path: str, device: Any) -> Any:
    """A checkpoint file of tensors, on ``device``. Loaded on the CPU first: ``torch.load`` cannot map onto an
    indexed CPU device, which is what accelerate gives each process of a multi-process CPU run (``cpu:0``)."""
    return send_to_device(torch.load(path, map_location="cpu", weights_only=True), device)
