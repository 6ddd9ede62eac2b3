"""What a checkpoint saves and restores of dynamic sampling: the state that steers refill, one JSON file per process.

The refill stream's position, the planner's estimates, the reward range seen so far and the prompt history are
written beside each process's RNG state (``rng_state_{i}.pth``) in every checkpoint and read back on resume, so a
resumed run draws the same refill prompts and sizes its rounds as the uninterrupted run would have.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from transformers.trainer_utils import get_last_checkpoint

REFILL_STATE_FILE = "dapo_refill_state.json"


def refill_state_file(process_index: int, world_size: int) -> str:
    """Name of a process's refill-state file in a checkpoint, following the RNG state's (``rng_state_{i}.pth``).

    Example:
        >>> refill_state_file(0, 1), refill_state_file(3, 4)
        ('dapo_refill_state.json', 'dapo_refill_state_3.json')
    """
    stem, extension = os.path.splitext(REFILL_STATE_FILE)
    return REFILL_STATE_FILE if world_size <= 1 else f"{stem}_{process_index}{extension}"


class StateMixin:
    """Checkpoint state of `DAPOTrainer`'s dynamic sampling (the refill stream, planner, history, reward range)."""

    def dynamic_sampling_state(self) -> dict[str, Any]:
        """Everything that steers refill (JSON-ready): the refill stream's position, the planner's estimates, the
        reward range seen so far (it splits the zero-variance groups and the history's tallies) and the history."""
        return {
            "refill": self.refill_sampler.state_dict(),
            "planner": self.refill_planner.state_dict() if self.refill_planner is not None else None,
            "history": self.prompt_history.state_dict() if self.prompt_history is not None else None,
            "reward_range": list(self._reward_range),
        }

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
        partial = f"{path}.partial"
        try:
            with open(partial, "w") as handle:
                json.dump(self.dynamic_sampling_state(), handle)
            os.replace(partial, path)
        except BaseException:
            if os.path.exists(partial):
                os.remove(partial)
            raise
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
            self.load_dynamic_sampling_state_file(state_file)
        else:
            warnings.warn(
                f"resuming from {checkpoint} without {name}: the refill stream restarts from the beginning "
                "(refill prompts may repeat) and the round planner and prompt history start empty.",
                stacklevel=3,
            )
