"""Verifier reward functions for TRL's GRPOTrainer (usable without trl_dapo_ext)."""

from .math_answers import (  # noqa: F401
    FORMAT_REWARD_WEIGHT,
    MathFormatReward,
    MathReward,
    answers_match,
    close_math_workers,
    extract_final_answer,
    make_math_format_reward,
    make_math_reward,
    math_format_reward,
    math_reward,
)
