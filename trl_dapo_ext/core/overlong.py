"""DAPO's soft overlong punishment (Yu et al. 2025, Eq. 13) on completion token lengths.

With ``L_max`` the length budget and ``L_cache`` the buffer before it::

    R_length(L) = 0                                   if L <= L_max - L_cache
                = (L_max - L_cache - L) / L_cache     if L_max - L_cache < L <= L_max
                = -1                                  if L > L_max

times ``penalty_factor`` (veRL's ``overlong_penalty_factor``). The penalty falls linearly from 0 to ``-factor``
across the buffer, so a completion that rambles is punished gradually instead of scored as a plain failure.

Lengths are generated tokens including the terminating EOS, as TRL counts them (``len(completion_ids[i])``). When
``L_max`` is the generation cap itself, a truncated completion has ``L == L_max`` and gets exactly ``-factor``.

The penalty shapes the task reward; it is no score of its own. A completion that no task reward could score (every
task reward None) gets no penalty either (:func:`penalty_only_where_scored`), so it stays unscorable: TRL leaves such
a row out of the group baseline and gives it advantage 0, instead of training on its length alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def overlong_penalty(
    lengths: torch.Tensor | Sequence[int],
    max_length: int,
    buffer_length: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """Soft overlong penalty per completion (DAPO Eq. 13), a float tensor of values in ``[-penalty_factor, 0]``.

    Args:
        lengths: completion lengths in tokens (EOS included).
        max_length: ``L_max``, the length budget (TRL's ``max_completion_length``).
        buffer_length: ``L_cache``, width of the linear-penalty zone before ``L_max``; ``0 < L_cache <= L_max``.
        penalty_factor: magnitude of the penalty at and beyond ``L_max``.

    Example (L_max=20, L_cache=4: free up to 16, -1/4 per extra token, -1 beyond 20):
        >>> overlong_penalty([16, 17, 18, 20, 21], max_length=20, buffer_length=4)
        tensor([ 0.0000, -0.2500, -0.5000, -1.0000, -1.0000])
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be > 0, got {max_length}")
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"buffer_length must satisfy 0 < buffer_length <= max_length={max_length}, got {buffer_length}"
        )
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    lengths = torch.as_tensor(lengths, dtype=torch.float64)

    # DAPO (Yu et al. 2025) Eq. 13: 0 up to L_max - L_cache, then (L_max - L_cache - L) / L_cache inside the buffer
    # (linear from 0 to -1), and -1 beyond L_max.
    free_length = max_length - buffer_length
    in_buffer = (free_length - lengths) / buffer_length
    penalty = torch.where(lengths <= free_length, torch.zeros_like(lengths), in_buffer)
    penalty = torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
    return (penalty * penalty_factor).to(torch.float32)


def penalty_only_where_scored(
    rewards_per_func: torch.Tensor, penalty_column: int, task_columns: Sequence[int]
) -> torch.Tensor:
    """A copy of the ``(N, n_funcs)`` reward matrix whose penalty column is NaN on every row no task reward scored.

    TRL (``GRPOTrainer``, "every reward function returned None") marks a row unscorable only when *every* column is
    NaN; the penalty column always has a value, so without this an unscorable row would count as scored 0 plus its
    penalty: it would join its group's baseline and be trained on its length. Rows with at least one task reward keep
    their penalty. Without task columns the matrix is returned unchanged (the penalty is then the only reward).

    Example (columns: a task reward, the penalty; the second row's task reward is None):
        >>> rewards = torch.tensor([[1.0, -0.5], [float("nan"), -0.25]])
        >>> penalty_only_where_scored(rewards, penalty_column=1, task_columns=[0])
        tensor([[ 1.0000, -0.5000],
                [    nan,     nan]])
    """
    masked = rewards_per_func.clone()
    if len(task_columns) == 0:
        return masked
    unscored = torch.isnan(rewards_per_func[:, list(task_columns)]).all(dim=1)
    masked[unscored, penalty_column] = torch.nan
    return masked


class OverlongPenalty:
    """TRL reward function that returns :func:`overlong_penalty` of each completion's token length.

    The trainer appends it to ``reward_funcs`` when ``overlong_buffer_length`` is set, so the penalty is added to the
    task reward before advantages and reported on its own as ``rewards/overlong_penalty/mean``. It scores every
    completion; the trainer then blanks it (NaN) on rows no task reward scored (:func:`penalty_only_where_scored`).

    Example:
        >>> penalty = OverlongPenalty(max_length=20, buffer_length=4)
        >>> penalty(completions=["..."] * 2, completion_ids=[[1] * 10, [1] * 18])
        [0.0, -0.5]
    """

    __name__ = "overlong_penalty"

    def __init__(self, max_length: int, buffer_length: int, penalty_factor: float = 1.0):
        overlong_penalty([0], max_length, buffer_length, penalty_factor)  # validate once, at construction
        self.max_length = max_length
        self.buffer_length = buffer_length
        self.penalty_factor = penalty_factor

    def __call__(self, completions: list, completion_ids: list[list[int]], **kwargs) -> list[float]:
        lengths = [len(ids) for ids in completion_ids]
        return overlong_penalty(lengths, self.max_length, self.buffer_length, self.penalty_factor).tolist()

    def __repr__(self) -> str:
        return (
            f"OverlongPenalty(max_length={self.max_length}, buffer_length={self.buffer_length}, "
            f"penalty_factor={self.penalty_factor})"
        )
