"""Reward functions that say who failed: an exception a reward function raises becomes a `RewardFunctionError`
naming the function and the training step, with the original exception as its cause."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import compat


class RewardFunctionError(RuntimeError):
    """A reward function raised; the message names it and the step, and the original exception is the cause."""


def guarded(func: Any, name: str, where: Callable[[], str]) -> Any:
    """``func`` (sync or async, as TRL will call it) raising `RewardFunctionError` instead; models unchanged.

    ``where()`` says when the call happened (e.g. ``"training step 3"``), read only when the function raised.

    Example:
        >>> def broken(completions, **kwargs):
        ...     raise KeyError("answer")
        >>> guarded(broken, "broken", lambda: "training step 1")(["x"])
        Traceback (most recent call last):
        ...
        trl_dapo_ext.reward_guard.RewardFunctionError: reward function 'broken' raised at training step 1: KeyError: 'answer'. Fix the function, or return None for completions it cannot score (TRL leaves those out of the advantages).
    """
    if isinstance(func, torch.nn.Module):
        return func

    def named(error: Exception) -> RewardFunctionError:
        # A ValueError says what is wrong with the input (e.g. reward_funcs' missing-column error); any other
        # exception is a bug in the function, or a completion it cannot score.
        advice = (
            ""
            if isinstance(error, ValueError)
            else " Fix the function, or return None for completions it cannot score (TRL leaves those out of "
            "the advantages)."
        )
        return RewardFunctionError(
            f"reward function {name!r} raised at {where()}: {type(error).__name__}: {str(error).rstrip('.')}.{advice}"
        )

    if compat.is_async_callable(func):

        async def guarded_async(*args, **kwargs):
            try:
                return await func(*args, **kwargs)
            except Exception as error:
                raise named(error) from error

        return guarded_async

    def guarded_sync(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as error:
            raise named(error) from error

    return guarded_sync
