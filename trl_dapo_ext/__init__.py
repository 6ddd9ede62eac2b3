"""trl-dapo-ext: DAPO dynamic sampling, overlong shaping, leave-one-out baselines and diagnostics for TRL.

Drop-in use: replace ``from trl import GRPOConfig, GRPOTrainer`` with ``from trl_dapo_ext import GRPOConfig,
GRPOTrainer``; with every new field at its default, training is identical to TRL's.
"""

from .advantages import combine_rewards, group_advantages, nan_std
from .config import DAPOConfig, as_dapo_config
from .overlong import OverlongPenalty, overlong_penalty
from .trainer import DAPOTrainer

# Aliases so that changing the import line is the only edit an existing TRL script needs.
GRPOConfig = DAPOConfig
GRPOTrainer = DAPOTrainer

__version__ = "0.1.0"

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
