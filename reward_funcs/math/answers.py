"""Verifier rewards for math answers that a policy cannot game.

Public API (TRL reward-function signature: `completions` plus dataset columns as keyword arguments):

- `math_reward(completions, **kwargs)`: 1.0 correct, 0.0 otherwise, None when the gold cannot be parsed.
- `make_math_reward(...)`: the same with other options (timeout, workers, unanchored fallback for base models).
- `math_format_reward` / `make_math_format_reward(...)`: a small format bonus (at most `FORMAT_REWARD_WEIGHT`).
- `extract_final_answer(text)` and `answers_match(predicted, gold)` for direct use.
- `close_math_workers()`: stop the verifier worker processes (also done at interpreter exit).

>>> from reward_funcs import math_reward
>>> math_reward([r"So the answer is $\\boxed{\\frac{1}{2}}$.", "Answer: 3 or 4"], answer=["0.5", "4"])
[1.0, 0.0]

The policy (what counts as the final answer, hedges, equivalence, time limits) is in docs/math-grading.md. The
verdicts (worker pools, caches, the rounds of symbolic comparison) are computed by :mod:`.verdicts`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..inputs import completion_text, require_column
from . import extract as _ex
from . import forms as _fm
from .compare import _prepare, _prepare_gold
from .verdicts import _default_workers, _score_pairs, close_math_workers  # noqa: F401  (close_math_workers: public)

FORMAT_REWARD_WEIGHT = 0.1
"""Default weight of the format reward. Weights must stay below 1.0 (a correct answer), so a well-formatted wrong
answer always scores less than a correct one."""

# The public signatures below write these defaults as numbers, so that the API page shows them (a test checks that
# they agree with these names).
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_LIMIT_MB = 2048
GOLD_COLUMNS = ("answer", "solution")  # where math_reward finds the gold answer, in this order


def extract_final_answer(text: str) -> str | None:
    """The final answer of a completion: the content of its last anchored answer, or None.

    Anchors: `\\boxed{}`/`\\fbox{}`, `<answer>...</answer>`, `#### N`, an `Answer:` line, "the answer is X".
    Reasoning inside `<think>...</think>` is ignored; an unclosed `<think>` or box gives None.

    >>> extract_final_answer(r"<think>maybe \\boxed{2}</think> So \\boxed{3}. Wait, no: \\boxed{4}")
    '4'
    >>> extract_final_answer("The sum is 12.") is None
    True
    """
    return _ex.extract_answer(completion_text(text))


def answers_match(
    predicted: str | None,
    gold: str,
    timeout_s: float = 5.0,
    *,
    workers: int | None = None,
) -> bool:
    """Whether an extracted answer equals the gold under the policy (exact, hedges lose; see docs/math-grading.md).

    `gold` may be raw (`18`), a GSM8K solution (`... #### 18`) or a MATH solution with `\\boxed{}`. Symbolic work
    runs in a worker process killed after `timeout_s` seconds, so this returns within the limit from any thread.

    >>> answers_match("1,000", "1000"), answers_match("3 or 4", "4"), answers_match(r"\\frac{2}{4}", "0.5")
    (True, False, True)
    """
    pred = _prepare(_ex.clean_answer(predicted)) if predicted is not None else None
    g = _prepare_gold(str(gold))
    verdict = _score_pairs([(pred, g)], timeout_s, workers or _default_workers(), DEFAULT_MEMORY_LIMIT_MB)[0]
    return bool(verdict)


class MathReward:
    """Correctness reward for math answers (TRL reward-function signature). Build it with `make_math_reward`."""

    columns = GOLD_COLUMNS  # the dataset columns it grades against (the first one present)

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        workers: int | None = None,
        unanchored_fallback: bool = False,
        memory_limit_mb: int = 2048,
        name: str = "math_reward",
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.workers = int(workers) if workers else _default_workers()
        self.unanchored_fallback = bool(unanchored_fallback)
        self.memory_limit_mb = int(memory_limit_mb)
        self.__name__ = name  # TRL names the reward metric after this

    def __repr__(self) -> str:
        return (
            f"MathReward(timeout_s={self.timeout_s}, workers={self.workers}, "
            f"unanchored_fallback={self.unanchored_fallback}, name={self.__name__!r})"
        )

    def __call__(self, completions: Sequence, **kwargs) -> list[float | None]:
        golds = _gold_column(kwargs, self.__name__)
        if len(golds) != len(completions):
            raise ValueError(f"got {len(completions)} completions but {len(golds)} gold answers")
        answers = [
            _ex.extract_answer(completion_text(c), unanchored_fallback=self.unanchored_fallback) for c in completions
        ]
        pairs = [
            (_prepare(a) if a is not None else None, _prepare_gold(None if g is None else str(g)))
            for a, g in zip(answers, golds, strict=True)
        ]
        prompts = kwargs.get("prompts")
        prompts = [_prompt_text(p) for p in prompts] if prompts is not None and len(prompts) == len(pairs) else None
        verdicts = _score_pairs(pairs, self.timeout_s, self.workers, self.memory_limit_mb, prompts)
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("math_answer", ["" if a is None else a for a in answers])
        return [None if v is None else float(v) for v in verdicts]


def _prompt_text(prompt) -> str:
    """Every message of a prompt (a string or TRL's conversational list), in `echo_form`."""
    if isinstance(prompt, (list, tuple)):
        prompt = "\n".join(completion_text(m) for m in prompt if isinstance(m, dict))
    return _fm.echo_form(prompt) if isinstance(prompt, str) else ""


def _gold_column(kwargs: dict, name: str) -> list:
    return require_column(kwargs, GOLD_COLUMNS, name, "the gold answer", option="answer_column")


def make_math_reward(
    *,
    timeout_s: float = 5.0,
    workers: int | None = None,
    unanchored_fallback: bool = False,
    memory_limit_mb: int = 2048,
    name: str = "math_reward",
) -> MathReward:
    """A `math_reward` with other options.

    - `timeout_s`: hard wall-clock limit in seconds per symbolic comparison (the worker is killed; the answer scores
      0).
    - `workers`: worker processes for symbolic comparisons (default: cores, at most 4).
    - `unanchored_fallback`: with no anchored answer, use the last number in the text (for base models only; it
      rewards a number that merely appears, so it is off by default).
    - `memory_limit_mb`: address-space limit of each worker in MiB (0: none).

    >>> reward = make_math_reward(unanchored_fallback=True, name="math_reward_base")
    >>> reward(["3 + 4 = 7"], answer=["7"]), reward.__name__
    ([1.0], 'math_reward_base')
    """
    return MathReward(
        timeout_s=timeout_s,
        workers=workers,
        unanchored_fallback=unanchored_fallback,
        memory_limit_mb=memory_limit_mb,
        name=name,
    )


class MathFormatReward:
    """`weight` if the completion is `<think>...</think>` followed by an anchored answer, else 0.0.

    Build it with `make_math_format_reward`. The weight must be below 1.0, the reward of a correct answer, so that
    format can never outweigh correctness when both rewards are summed.
    """

    def __init__(self, *, weight: float = FORMAT_REWARD_WEIGHT, require_think: bool = True, name: str = "") -> None:
        if not 0.0 <= weight < 1.0:
            raise ValueError(f"weight must be in [0, 1) so that format cannot outweigh correctness, got {weight}")
        self.weight = float(weight)
        self.require_think = bool(require_think)
        self.__name__ = name or "math_format_reward"

    def __repr__(self) -> str:
        return f"MathFormatReward(weight={self.weight}, require_think={self.require_think}, name={self.__name__!r})"

    def __call__(self, completions: Sequence, **kwargs) -> list[float]:
        return [self.weight if self._well_formatted(completion_text(c)) else 0.0 for c in completions]

    def _well_formatted(self, text: str) -> bool:
        lower = text.lower()
        if self.require_think:
            opens, closes = lower.count("<think>"), lower.count("</think>")
            # One reasoning block at the start; the opening tag may live in the prompt (chat templates).
            if closes != 1 or opens > 1:
                return False
            if opens == 1 and not (
                lower.lstrip().startswith("<think>") and lower.index("<think>") < lower.index("</think>")
            ):
                return False
            after = text[lower.index("</think>") + len("</think>") :]
        else:
            after = _ex.strip_think(text)
            if after is None:
                return False
        found, answer = _ex.find_anchor(after)
        # Only an answer that could be a value: a policy learnt to write a literal `\\boxed{number}` for the bonus.
        return found and _fm.could_be_value(answer)


def make_math_format_reward(
    *, weight: float = FORMAT_REWARD_WEIGHT, require_think: bool = True, name: str = ""
) -> MathFormatReward:
    """A format reward worth `weight` (< 1.0) for `<think>...</think>` then an anchored answer.

    >>> fmt = make_math_format_reward()
    >>> fmt(["<think>2+2</think>\\nThe answer is $\\boxed{4}$.", "4"])
    [0.1, 0.0]
    """
    return MathFormatReward(weight=weight, require_think=require_think, name=name)


math_reward = MathReward()
math_format_reward = MathFormatReward()
math_answer_format_reward = MathFormatReward(require_think=False, name="math_answer_format_reward")
"""The format bonus for models that write no `<think>` block: it only asks for an anchored final answer."""
