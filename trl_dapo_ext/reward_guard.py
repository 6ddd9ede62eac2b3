"""Reward functions that say who failed: an exception a reward function raises becomes a `RewardFunctionError`
naming the function and the training step, with the original exception as its cause."""

from __future__ import annotations

import inspect
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
        ...     raise RuntimeError("judge crashed")
        >>> guarded(broken, "broken", lambda: "training step 1")(["x"])
        Traceback (most recent call last):
        ...
        trl_dapo_ext.reward_guard.RewardFunctionError: reward function 'broken' raised at training step 1: RuntimeError: judge crashed. Fix the function, or return None for completions it cannot score (TRL leaves those out of the advantages).
    """
    if isinstance(func, torch.nn.Module):
        return func

    if compat.is_async_callable(func):

        async def guarded_async(*args, **kwargs):
            try:
                return await func(*args, **kwargs)
            except Exception as error:
                raise _named(func, name, where, error, args, kwargs) from error

        return guarded_async

    def guarded_sync(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as error:
            raise _named(func, name, where, error, args, kwargs) from error

    return guarded_sync


def _named(
    func: Callable, name: str, where: Callable[[], str], error: Exception, args: tuple, kwargs: dict
) -> RewardFunctionError:
    """The error a raising reward function becomes: what is missing, or what to fix, with where it happened."""
    missing = missing_columns(func, error, args, kwargs)
    if missing:
        return RewardFunctionError(
            f"reward function {name!r} needs the dataset column(s) {', '.join(map(repr, missing))}, which the "
            f"training rows lack (TRL passes each dataset column as a keyword argument; these rows have "
            f"{', '.join(sorted(kwargs)) or 'none'}). Add or rename the column in the dataset, or give the "
            "parameter a default."
        )
    # A ValueError says what is wrong with the input (e.g. reward_funcs' missing-column error); a KeyError of
    # a name the rows lack is most often a column read from kwargs; any other exception is a bug in the
    # function, or a completion it cannot score.
    advice = (
        ""
        if isinstance(error, ValueError)
        else " Fix the function, or return None for completions it cannot score (TRL leaves those out of "
        "the advantages)."
    )
    key = error.args[0] if isinstance(error, KeyError) and error.args else None
    if isinstance(key, str) and key not in kwargs:
        advice = (
            f" If {key!r} is a dataset column, the training rows lack it (they have "
            f"{', '.join(sorted(kwargs)) or 'none'}): add or rename it in the dataset."
        )
    return RewardFunctionError(
        f"reward function {name!r} raised at {where()}: {type(error).__name__}: {str(error).rstrip('.')}.{advice}"
    )


def missing_columns(func: Callable, error: Exception, args: tuple, kwargs: dict) -> list[str]:
    """The dataset columns a reward function asked for and was not given: the required parameters a call could not
    bind (a ``TypeError``). Empty when the error is not that.

    Example:
        >>> def needs_answer(completions, answer, **kwargs):
        ...     return [1.0]
        >>> try:
        ...     needs_answer(["x"], prompts=["p"])
        ... except TypeError as error:
        ...     missing_columns(needs_answer, error, (["x"],), {"prompts": ["p"]})
        ['answer']
    """
    if isinstance(error, TypeError):
        try:
            signature = inspect.signature(func)
            signature.bind(*args, **kwargs)
        except TypeError:
            bound = signature.bind_partial(*args, **kwargs).arguments
            return [
                parameter.name
                for parameter in signature.parameters.values()
                if parameter.default is inspect.Parameter.empty
                and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
                and parameter.name not in bound
            ]
        except ValueError:  # no signature (a builtin)
            return []
        return []
    return []
