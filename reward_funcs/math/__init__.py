"""Math rewards: grade a completion's final answer against the gold answer, exactly, without being gamed.

Modules: ``extract`` (the final answer: anchors, boxes, hedged boxes, ``<think>`` blocks), ``normalize``
(string normalisation, splitting into values, exact numbers), ``answers`` (equivalence, hedges, verdict caches and
the TRL reward functions), ``pool`` (killable worker processes for symbolic comparison) and ``worker`` (one such
process: math-verify / sympy).
"""

from .answers import (
    FORMAT_REWARD_WEIGHT,
    MathFormatReward,
    MathReward,
    answers_match,
    close_math_workers,
    extract_final_answer,
    make_math_format_reward,
    make_math_reward,
    math_answer_format_reward,
    math_format_reward,
    math_reward,
)

__all__ = [
    "FORMAT_REWARD_WEIGHT",
    "MathFormatReward",
    "MathReward",
    "answers_match",
    "close_math_workers",
    "extract_final_answer",
    "make_math_format_reward",
    "make_math_reward",
    "math_answer_format_reward",
    "math_format_reward",
    "math_reward",
]
