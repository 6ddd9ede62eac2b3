"""The one error a library reward raises when the dataset column it grades against is missing.

TRL passes every dataset column to a reward function as a keyword argument, so a missing column shows up as a
missing keyword. `math_reward` and `code_reward` both raise :class:`MissingColumnError` for it, with the columns that
were present and how to map one (``trl-dapo train``'s ``answer_column`` / ``tests_column``).

Example:
    >>> require_column({"question": ["1+1?"]}, ("answer", "solution"), "math_reward", "the gold answer",
    ...                option="answer_column")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward_funcs._columns.MissingColumnError: math_reward needs the gold answer in a dataset column named 'answer' (or 'solution'); ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Keywords TRL adds to every reward call besides the dataset columns.
TRAINER_KWARGS = frozenset({"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


class MissingColumnError(ValueError):
    """A reward function was called without the dataset column it needs (a ValueError: fix the data, not the code)."""

    def __init__(self, reward_name: str, columns: Sequence[str], what: str, present: Sequence[str], option: str):
        self.reward_name, self.columns, self.option = reward_name, tuple(columns), option
        named = repr(columns[0]) + "".join(f" (or {c!r})" for c in columns[1:])
        super().__init__(
            f"{reward_name} needs {what} in a dataset column named {named}; columns present: "
            f"{sorted(present) if present else 'none'}. Rename your column to {columns[0]!r}, or with trl-dapo train "
            f"map it with {option}: NAME (flag --{option} NAME)"
        )


def require_column(
    kwargs: Mapping[str, Any], columns: Sequence[str], reward_name: str, what: str, option: str
) -> list[Any]:
    """The values of the first of ``columns`` present (not None) in a reward call's ``kwargs``, as a list.

    Raises :class:`MissingColumnError` when none is present.
    """
    for column in columns:
        if kwargs.get(column) is not None:
            return list(kwargs[column])
    present = [key for key in kwargs if key not in TRAINER_KWARGS]
    raise MissingColumnError(reward_name, columns, what, present, option)
