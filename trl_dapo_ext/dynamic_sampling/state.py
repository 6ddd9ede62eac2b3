"""What a checkpoint saves and restores of dynamic sampling: the state that steers refill, one JSON file per process,
and the rest of the generation batch when the checkpoint falls inside a generation cycle.

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
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import torch
from transformers.trainer_utils import get_last_checkpoint

REFILL_STATE_FILE = "dapo_refill_state.json"
GENERATION_BUFFER_FILE = "dapo_generation_buffer.pt"


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


class StateMixin:
    """Checkpoint state of `DAPOTrainer`'s dynamic sampling (the refill stream, planner, history, reward range)."""

    def dynamic_sampling_state(self) -> dict[str, Any]:
        """Everything that steers refill (JSON-ready): the refill stream's position, the planner's estimates, the
        reward range seen so far (it splits the zero-variance groups and the history's tallies) and the history;
        and TRL's micro-step count, which places the run in its generation cycle (restored only on resume)."""
        return {
            "refill": self.refill_sampler.state_dict(),
            "planner": self.refill_planner.state_dict() if self.refill_planner is not None else None,
            "history": self.prompt_history.state_dict() if self.prompt_history is not None else None,
            "reward_range": list(self._reward_range),
            "micro_step": self._step,
        }

    def _inside_generation_cycle(self) -> bool:
        """Whether TRL's next micro-step trains a buffered micro-batch instead of generating (``_prepare_inputs``)."""
        generate_every = self.args.steps_per_generation * self.args.num_iterations
        return self._step % generate_every != 0 and self._buffered_inputs is not None

    def load_dynamic_sampling_state(self, state: dict[str, Any]) -> None:
        self.refill_sampler.load_state_dict(state["refill"])
        for name, component in (("planner", self.refill_planner), ("history", self.prompt_history)):
            if component is not None and state.get(name) is not None:
                component.load_state_dict(state[name])
        if state.get("reward_range") is not None:
            self._reward_range = [float(value) for value in state["reward_range"]]

    def save_dynamic_sampling_state(self, folder: str, process_index: int, world_size: int) -> str:
        """Write this process's refill state into a checkpoint ``folder``; return the file's path.

        Every process writes its own file (the states agree: each is built from gathered values), so every node
        of a run finds one beside its own RNG state, whether or not the checkpoint folder is shared. Written to a
        temporary name first, so an interrupted write never leaves a truncated state behind; errors propagate.
        """
        path = os.path.join(folder, refill_state_file(process_index, world_size))
        state = self.dynamic_sampling_state()

        def write_state(partial: str) -> None:
            with open(partial, "w") as handle:
                json.dump(state, handle)

        _replace_atomically(path, write_state)
        if self._inside_generation_cycle():  # the rest of this batch is trained after the checkpoint
            buffer = os.path.join(folder, refill_state_file(process_index, world_size, GENERATION_BUFFER_FILE))
            _replace_atomically(buffer, lambda partial: torch.save(self._buffered_inputs, partial))
        return path

    def load_dynamic_sampling_state_file(self, path: str) -> None:
        with open(path) as handle:
            self.load_dynamic_sampling_state(json.load(handle))

    def _resume_dynamic_sampling(self, resume_from_checkpoint: str | bool) -> None:
        """Load this process's refill state from the checkpoint ``train`` resumes from; warn when it has none."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        name = refill_state_file(self.args.process_index, self.args.world_size)
        state_file = os.path.join(checkpoint, name) if checkpoint else None
        if state_file and os.path.isfile(state_file):
            with open(state_file) as handle:
                state = json.load(handle)
            self.load_dynamic_sampling_state(state)
            self._resume_generation_cycle(checkpoint, state.get("micro_step"))
        else:
            warnings.warn(
                f"resuming from {checkpoint} without {name}: the refill stream restarts from the beginning "
                "(refill prompts may repeat) and the round planner and prompt history start empty.",
                stacklevel=3,
            )

    def _resume_generation_cycle(self, checkpoint: str, micro_step: int | None) -> None:
        """Put TRL's micro-step count back, and inside a generation cycle the rest of the batch, so that the resumed
        run trains the micro-batches and generates at the steps the uninterrupted run did."""
        if micro_step is None:  # a checkpoint from before the count was saved: TRL's own resume (count from 0)
            return
        self._step = int(micro_step)
        if self._step % (self.args.steps_per_generation * self.args.num_iterations) == 0:
            return  # at a cycle's start: the next micro-step generates anyway
        name = refill_state_file(self.args.process_index, self.args.world_size, GENERATION_BUFFER_FILE)
        path = os.path.join(checkpoint, name)
        if os.path.isfile(path):
            self._buffered_inputs = torch.load(path, map_location=self.accelerator.device, weights_only=True)
        else:
            warnings.warn(
                f"resuming inside a generation cycle from {checkpoint} without {name}: the rest of the cycle trains "
                "on a freshly generated batch of the same prompts, with other refill draws than the interrupted run's "
                "(the later cycles start at the same steps).",
                stacklevel=4,
            )
