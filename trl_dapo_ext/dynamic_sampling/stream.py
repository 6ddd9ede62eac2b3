"""A rank-consistent, checkpointable stream of dataset indices for dynamic-sampling refill rounds.

The trainer's own dataloader cannot supply more prompts: its iterator is a local variable of the Trainer's loop, and
each of its batches is repeated ``steps_per_generation * num_iterations`` times. Refill prompts therefore come from
this separate stream over the same training dataset. Every process builds the same permutation from the same seed,
takes the same global slice per round and keeps its own part, so no communication is needed and every process asks
the generator for the same number of prompts.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch


class RefillSampler:
    """Endless shuffled passes over ``range(dataset_size)``; a new permutation each pass, seeded by (seed, pass).

    With ``shuffle=False`` (a curriculum), the stream follows the dataset order instead: :meth:`begin_step` moves it
    to the prompt right after the step's own batch (the dataloader's position). Either way, within a step it never
    hands out the batch's own prompts or a prompt it already handed out, until the step has used every prompt.

    Example:
        >>> sampler = RefillSampler(dataset_size=5, seed=0)
        >>> first = sampler.take(3) + sampler.take(2)
        >>> sorted(first)  # one full pass visits every index once
        [0, 1, 2, 3, 4]
        >>> state = sampler.state_dict(); after = sampler.take(4)
        >>> resumed = RefillSampler(dataset_size=5, seed=0); resumed.load_state_dict(state)
        >>> resumed.take(4) == after
        True
    """

    def __init__(self, dataset_size: int, seed: int, shuffle: bool = True):
        if dataset_size < 1:
            raise ValueError(f"the refill stream needs a non-empty dataset, got {dataset_size} rows")
        self.dataset_size = dataset_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0  # next index inside the current pass
        self.taken = 0  # indices handed out so far, over all passes
        self.step_used: frozenset[int] = frozenset()  # unshuffled: this step's prompts so far (own and refills)
        self._order = self._permutation(self.epoch)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.dataset_size))
        # Keyed apart from TRL's RepeatSampler, which seeds its generator with the same seed itself: a refill stream
        # in the dataloader's order would hand out, as refills, exactly the prompts the dataloader brings next.
        # The key names the module this stream was first written in: changing it would change every run's refills.
        digest = hashlib.blake2b(f"trl_dapo_ext.refill/{self.seed}/{epoch}".encode(), digest_size=8).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def begin_step(self, own_indices: list[int]) -> None:
        """Start a step whose batch holds the dataset indices ``own_indices`` (every process's; ``-1``: unknown).

        Within the step the stream never hands out one of these prompts, nor one it already handed out, until the
        step has used every prompt of the dataset: a batch never holds two groups of one prompt. Unshuffled, the
        step's refills also continue the dataset order after the batch's last prompt (the dataloader's position).

        Example:
            >>> stream = RefillSampler(dataset_size=6, seed=0, shuffle=False)
            >>> stream.begin_step([2, 3]); stream.take(3)
            [4, 5, 0]
            >>> stream.begin_step([4, 5]); stream.take(5)  # 4 and 5 are the batch's own: not handed out again
            [0, 1, 2, 3, 4]
        """
        known = [index for index in own_indices if 0 <= index < self.dataset_size]
        self.step_used = frozenset(known)
        if self.shuffle or not known:
            return
        self.position = known[-1] + 1  # the dataloader hands out the dataset in order: its next prompt
        if self.position == self.dataset_size:
            self.epoch, self.position = self.epoch + 1, 0

    def take(self, count: int) -> list[int]:
        """The next ``count`` dataset indices this step has not used yet (global: the same on every process); once
        the step has used every prompt (it needs more than the dataset holds), it starts over."""
        used, indices = set(self.step_used), []
        while len(indices) < count:
            if len(used) >= self.dataset_size:
                used = set()
            if self.position == self.dataset_size:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            index = self._order[self.position]
            self.position += 1
            if index not in used:
                used.add(index)
                indices.append(index)
        # A new set, not an update: a preview (`peek`, or a shallow copy of the stream) must leave this one's intact.
        self.step_used = frozenset(used)
        self.taken += count
        return indices

    def peek(self, count: int) -> list[int]:
        """The indices the next ``take(count)`` would return, without advancing the stream.

        Example:
            >>> sampler = RefillSampler(dataset_size=4, seed=1)
            >>> sampler.peek(6) == sampler.take(6)
            True
        """
        saved = (self.epoch, self.position, self.taken, self._order, self.step_used)
        try:
            return self.take(count)
        finally:
            self.epoch, self.position, self.taken, self._order, self.step_used = saved

    def state_dict(self) -> dict[str, Any]:
        return {
            "dataset_size": self.dataset_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "position": self.position,
            "taken": self.taken,
            "step_used": sorted(self.step_used),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("dataset_size", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"refill state was saved with {key}={state[key]!r} but this run has {getattr(self, key)!r}; "
                    "resume with the same dataset, seed and shuffle setting, or start a fresh run"
                )
        self.epoch, self.position, self.taken = state["epoch"], state["position"], state["taken"]
        self.step_used = frozenset(state.get("step_used", ()))  # older checkpoints: between steps, nothing used
        self._order = self._permutation(self.epoch)


def local_share(indices: list[int], count_per_process: int, process_index: int) -> list[int]:
    """This process's contiguous share of a round's global refill slice (``count_per_process`` indices).

    Example:
        >>> [local_share([7, 1, 4, 0, 3, 9], 2, rank) for rank in range(3)]
        [[7, 1], [4, 0], [3, 9]]
    """
    start = process_index * count_per_process
    return indices[start : start + count_per_process]
