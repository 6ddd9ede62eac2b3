"""trl-dapo-ext: DAPO dynamic sampling, overlong shaping, leave-one-out baselines and diagnostics for TRL.

Drop-in use: replace ``from trl import GRPOConfig, GRPOTrainer`` with ``from trl_dapo_ext import GRPOConfig,
GRPOTrainer``; with every new field at its default, training is identical to TRL's.

The names below are imported on first use (PEP 562), so ``import trl_dapo_ext.diagnostics`` or the ``trl-dapo``
command line do not pay for importing TRL and transformers (several seconds) unless they need them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "DAPOConfig": (".config", "DAPOConfig"),
    "DAPOTrainer": (".trainer", "DAPOTrainer"),
    # Aliases so that changing the import line is the only edit an existing TRL script needs.
    "GRPOConfig": (".config", "DAPOConfig"),
    "GRPOTrainer": (".trainer", "DAPOTrainer"),
    "OverlongPenalty": (".overlong", "OverlongPenalty"),
    "as_dapo_config": (".config", "as_dapo_config"),
    "combine_rewards": (".advantages", "combine_rewards"),
    "group_advantages": (".advantages", "group_advantages"),
    "nan_std": (".advantages", "nan_std"),
    "overlong_penalty": (".overlong", "overlong_penalty"),
}

__all__ = [
    "DAPOConfig",
    "DAPOTrainer",
    "GRPOConfig",
    "GRPOTrainer",
    "OverlongPenalty",
    "as_dapo_config",
    "combine_rewards",
    "group_advantages",
    "nan_std",
    "overlong_penalty",
]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(import_module(module, __name__), attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from .advantages import combine_rewards, group_advantages, nan_std
    from .config import DAPOConfig, as_dapo_config
    from .config import DAPOConfig as GRPOConfig
    from .overlong import OverlongPenalty, overlong_penalty
    from .trainer import DAPOTrainer
    from .trainer import DAPOTrainer as GRPOTrainer
