"""trl-dapo-ext: DAPO dynamic sampling, overlong shaping, leave-one-out baselines and diagnostics for TRL.

Drop-in use: replace ``from trl import GRPOConfig, GRPOTrainer`` with ``from trl_dapo_ext import GRPOConfig,
GRPOTrainer``; with every new field at its default, training is identical to TRL's.

The public names are the config, the trainer (and their TRL-named aliases) and the exceptions a user may catch.
Everything else lives in submodules (``trl_dapo_ext.core`` for the pure math, ``trl_dapo_ext.dynamic_sampling``
for the refill machinery) and may change between releases.

The names below are imported on first use (PEP 562), so ``import trl_dapo_ext.core.metrics`` or the ``trl-dapo``
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
    # The exceptions a user can catch.
    "DynamicSamplingExhausted": (".dynamic_sampling.rounds", "DynamicSamplingExhausted"),
    "LaunchError": (".launch", "LaunchError"),
    "MissingColumnError": ("reward_funcs.inputs", "MissingColumnError"),
    "RewardFunctionError": (".reward_guard", "RewardFunctionError"),
    "TRLCompatibilityError": (".compat", "TRLCompatibilityError"),
    "UnsupportedBackendError": (".backends", "UnsupportedBackendError"),
    "UnsupportedBatchKey": (".dynamic_sampling.assembly", "UnsupportedBatchKey"),
}

__all__ = [
    "DAPOConfig",
    "DAPOTrainer",
    "DynamicSamplingExhausted",
    "GRPOConfig",
    "GRPOTrainer",
    "LaunchError",
    "MissingColumnError",
    "RewardFunctionError",
    "TRLCompatibilityError",
    "UnsupportedBackendError",
    "UnsupportedBatchKey",
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
    from reward_funcs.inputs import MissingColumnError

    from .backends import UnsupportedBackendError
    from .compat import TRLCompatibilityError
    from .config import DAPOConfig
    from .config import DAPOConfig as GRPOConfig
    from .dynamic_sampling.assembly import UnsupportedBatchKey
    from .dynamic_sampling.rounds import DynamicSamplingExhausted
    from .launch import LaunchError
    from .reward_guard import RewardFunctionError
    from .trainer import DAPOTrainer
    from .trainer import DAPOTrainer as GRPOTrainer
