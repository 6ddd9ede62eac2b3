"""Verifier reward functions for TRL's GRPOTrainer (GRPO/DAPO). Usable with plain TRL: never imports trl_dapo_ext.

Math answers: `math_reward`, `make_math_reward`, `extract_final_answer`, `answers_match`, `math_format_reward`,
`math_answer_format_reward`.
Code with unit tests in a sandbox: `code_reward`, `code_reward_partial`, `make_code_reward`, `run_code_tests`,
`extract_code`. Every reward name `trl-dapo train` accepts is importable from here.

The two libraries live in ``reward_funcs.math`` and ``reward_funcs.code``; ``reward_funcs.inputs`` holds what both
read from a TRL reward call (the completion's text, the dataset columns).
"""

from .code.extract import extract_code
from .code.reward import CodeReward, code_reward, code_reward_partial, make_code_reward
from .code.runner import CodeTestReport, TestOutcome, run_code_tests
from .math.answers import (
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
    "CodeReward",
    "CodeTestReport",
    "MathFormatReward",
    "MathReward",
    "TestOutcome",
    "answers_match",
    "close_math_workers",
    "code_reward",
    "code_reward_partial",
    "extract_code",
    "extract_final_answer",
    "make_code_reward",
    "make_math_format_reward",
    "make_math_reward",
    "math_answer_format_reward",
    "math_format_reward",
    "math_reward",
    "run_code_tests",
]
