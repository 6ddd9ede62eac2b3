"""The one place that knows which private TRL names `DAPOTrainer` relies on, and for which TRL releases.

TRL has no public hook for advantages or dynamic sampling, so the subclass overrides private methods of
`GRPOTrainer`. Their signatures are pinned here and checked at import: a TRL release that renames or reshapes one
fails loudly with this module's name in the message instead of training wrongly. `tests/test_compat.py` runs the same
check against every TRL release CI installs.
"""

from __future__ import annotations

import inspect
import warnings

import trl
from packaging.version import Version
from trl import GRPOTrainer

# Releases the whole test-suite runs against in CI (Makefile: test-main and test-trl-alt).
TESTED_TRL_RANGE = (Version("1.15.0"), Version("1.17.0"))  # [min, max)

# Private GRPOTrainer methods we override or call, with their parameter names (TRL 1.10 to 1.16 agree).
PRIVATE_METHODS: dict[str, tuple[str, ...]] = {
    # one generation round: generate, score, compute advantages, build the batch dict
    "_generate_and_score_completions": ("self", "inputs"),
    # runs every reward function and returns the gathered (N_global, n_funcs) reward matrix
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    # generation backends (transformers, vLLM, tools); returns the ragged completion lists
    "_generate": ("self", "prompts"),
    # buffers one generation batch and hands out steps_per_generation micro-batches
    "_prepare_inputs": ("self", "generation_batch"),
}

# Private attributes read or extended after GRPOTrainer.__init__.
PRIVATE_ATTRIBUTES: tuple[str, ...] = (
    "reward_funcs",
    "reward_func_names",
    "reward_processing_classes",
    "reward_weights",
    "num_generations",
    "num_generations_eval",
    "_metrics",
    "_logs",
    "_tokenizer",
    "eos_token_ids",
    "log_completions",
)


class TRLCompatibilityError(RuntimeError):
    """The installed TRL lacks a private seam that trl_dapo_ext overrides."""


def trl_version() -> Version:
    return Version(trl.__version__)


def check_private_methods(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if a pinned private method is missing or has other parameters."""
    for name, expected in PRIVATE_METHODS.items():
        method = getattr(trainer_class, name, None)
        if method is None:
            raise TRLCompatibilityError(
                f"trl {trl.__version__}: GRPOTrainer.{name} no longer exists; trl_dapo_ext supports trl "
                f">={TESTED_TRL_RANGE[0]},<{TESTED_TRL_RANGE[1]} (see trl_dapo_ext/compat.py)."
            )
        found = tuple(inspect.signature(inspect.unwrap(method)).parameters)
        if found != expected:
            raise TRLCompatibilityError(
                f"trl {trl.__version__}: GRPOTrainer.{name}{found} differs from the pinned {expected}; "
                "trl_dapo_ext must be updated for this TRL release (see trl_dapo_ext/compat.py)."
            )


def check_private_attributes(trainer: GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if a constructed trainer lacks an attribute we read or extend."""
    missing = [name for name in PRIVATE_ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer instances lack {missing}; trl_dapo_ext must be updated for this "
            "TRL release (see trl_dapo_ext/compat.py)."
        )


def warn_if_untested() -> None:
    low, high = TESTED_TRL_RANGE
    if not low <= trl_version() < high:
        warnings.warn(
            f"trl {trl.__version__} is outside the range trl_dapo_ext is tested against (>={low},<{high}).",
            stacklevel=3,
        )


check_private_methods()
warn_if_untested()
