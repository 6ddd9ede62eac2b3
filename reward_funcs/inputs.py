"""What TRL hands a reward function: the completions, and the dataset columns as keyword arguments.

* :func:`completion_text`: the text of a plain or conversational completion (the one definition every reward uses);
* :func:`require_column`: a dataset column a reward grades against, or :class:`MissingColumnError` naming the
  columns that were present and how to map one (``trl-dapo train``'s ``answer_column`` / ``tests_column``).

TRL passes every dataset column to a reward function as a keyword argument, so a missing column shows up as a
missing keyword. `math_reward` and `code_reward` both raise :class:`MissingColumnError` for it.

Example:
    >>> require_column({"question": ["1+1?"]}, ("answer", "solution"), "math_reward", "the gold answer",
    ...                option="answer_column")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward_funcs.inputs.MissingColumnError: math_reward needs the gold answer in a dataset column named 'answer' (or 'solution'); ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

# Keywords TRL adds to every reward call besides the dataset columns.
TRAINER_KWARGS = frozenset({"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


def completion_text(completion: Any, messages: Literal["last", "all"] = "last") -> str:
    """The text of a completion: a plain string as it is, or a conversation (TRL's conversational format: a list of
    message dicts with ``role`` and ``content``, the content a string or a list of multimodal parts).

    ``messages`` says which messages of a conversation count, because the rewards look for different things:

    * ``"last"`` (math rewards: the final answer is in the reply that ends the turn): the content of the last
      assistant message, or of the last message when none has that role; a single message dict is accepted; the
      text parts of multimodal content are concatenated; anything but a string or a list of messages is a
      ``TypeError``;
    * ``"all"`` (code rewards: the code block may be in any assistant turn): the contents of every assistant message,
      and of every part of multimodal content, one per line.

    >>> chat = [{"role": "assistant", "content": "x = 1"}, {"role": "tool", "content": "ok"},
    ...         {"role": "assistant", "content": [{"type": "text", "text": "Answer: "}, {"type": "text", "text": "2"}]}]
    >>> completion_text(chat), completion_text(chat, messages="all")
    ('Answer: 2', 'x = 1\\nAnswer: \\n2')
    """
    if isinstance(completion, str):
        return completion
    if messages == "all":
        return "\n".join(
            _parts_text(msg.get("content") or "", "\n", text_only=False)
            for msg in completion
            if isinstance(msg, dict) and msg.get("role", "assistant") == "assistant"
        )
    if isinstance(completion, dict):
        return _content_text(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in msgs if m.get("role", "assistant") == "assistant"]
        chosen = assistant[-1] if assistant else (msgs[-1] if msgs else None)
        return _content_text(chosen.get("content", "")) if chosen else ""
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _parts_text(content, "", text_only=True)
    return "" if content is None else str(content)


def _parts_text(content: Any, separator: str, text_only: bool) -> Any:
    """Multimodal content (a list of parts): the parts' texts joined by ``separator``, only those of type "text"
    when ``text_only``; other content as it is."""
    if not isinstance(content, list):
        return content
    parts = [p for p in content if isinstance(p, dict) and (not text_only or p.get("type", "text") == "text")]
    return separator.join(p.get("text", "") for p in parts)


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
