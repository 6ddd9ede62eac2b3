"""Verifier reward functions for TRL (GRPO/DAPO). Never imports trl_dapo_ext."""

from .code_tests import (
    CodeReward,
    CodeTestReport,
    TestOutcome,
    code_reward,
    extract_code,
    make_code_reward,
    run_code_tests,
)

__all__ = [
    "CodeReward",
    "CodeTestReport",
    "TestOutcome",
    "code_reward",
    "extract_code",
    "make_code_reward",
    "run_code_tests",
]
