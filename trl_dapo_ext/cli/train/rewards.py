"""Reward functions of a recipe: resolved by name, and checked against the dataset's columns before the model loads."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from .arguments import REWARD_FUNCS, TrainError


def resolve_reward_funcs(names: list[str]) -> list[Callable]:
    """Reward callables for the names of a recipe (registry names or dotted import paths).

    >>> [f.__name__ for f in resolve_reward_funcs(["math_reward"])]
    ['math_reward']
    >>> resolve_reward_funcs(["math_rewrad"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trl_dapo_ext.cli.train.arguments.TrainError: unknown reward function 'math_rewrad'; choose from math_reward, ...
    """
    if not names:
        raise TrainError("reward_funcs is empty; choose from " + ", ".join(REWARD_FUNCS))
    funcs = []
    for name in names:
        if name in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[name]())
        elif "." in name:
            module_name, attribute = name.rsplit(".", 1)
            _refuse_shadowed_library(name)
            # As TRL's `trl grpo`: modules next to the recipe's working directory are importable.
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                funcs.append(getattr(importlib.import_module(module_name), attribute))
            except (ImportError, AttributeError) as error:
                raise TrainError(f"cannot import reward function {name!r}: {error}") from None
        else:
            raise TrainError(
                f"unknown reward function {name!r}; choose from {', '.join(REWARD_FUNCS)}, "
                "or give a dotted import path (my_package.rewards.my_reward)"
            )
    return funcs


def _refuse_shadowed_library(name: str) -> None:
    """A user's own ``reward_funcs`` module in the working directory would shadow this package's reward library
    (same import name), and the library's own imports would then fail deep inside: say so at once."""
    if name.split(".")[0] != "reward_funcs":
        return
    import reward_funcs as library

    ours = os.path.dirname(os.path.abspath(library.__file__))
    for candidate in ("reward_funcs.py", "reward_funcs"):
        path = os.path.join(os.getcwd(), candidate)
        if os.path.exists(path) and os.path.abspath(path) != ours:
            raise TrainError(
                f"{path} has the import name of this package's reward library, reward_funcs, and the two cannot "
                f"both load: rename yours (e.g. my_rewards.py) and pass --reward_funcs "
                f"{name.replace('reward_funcs', 'my_rewards', 1)}."
            )


def check_reward_columns(reward_funcs: list[Callable], column_names: list[str]) -> None:
    """Before the model loads: every library reward finds its dataset column (`answer`, `tests`, ...).

    A library reward (one with a ``columns`` attribute, as `math_reward` and `code_reward`) is called on zero
    completions with the dataset's columns, so the error is its own `MissingColumnError`, which names the
    ``answer_column`` / ``tests_column`` mapping. Other reward functions are not called.
    """
    from reward_funcs.inputs import MissingColumnError

    for func in reward_funcs:
        if getattr(func, "columns", None) is None:
            continue
        try:
            func([], **{column: [] for column in column_names})
        except MissingColumnError as error:
            raise TrainError(str(error)) from None
