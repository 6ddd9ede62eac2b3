"""Plain helpers shared by test modules (import as `from helpers import ...`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from trl_dapo_ext.tiny import build_tiny_trainer, cpu_args

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks/ is not a package; registered first, as dataclasses need).
    benchmarks/ goes on ``sys.path``, as for a script run from it, so that a benchmark can import its neighbours."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.append(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def digit_fraction_reward(completions, **kwargs):
    """A dense reward that varies within groups of random completions: share of digit characters."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def grpo_kwargs(tmp_path, **overrides):
    """Config kwargs for a seconds-long CPU run that works with trl.GRPOConfig and DAPOConfig alike."""
    return cpu_args(
        tmp_path,
        **{
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 3,
            "learning_rate": 5e-3,
            "logging_steps": 1,
            "save_strategy": "no",
            "seed": 7,
            "disable_tqdm": True,
            **overrides,
        },
    )


def tiny_trainer(model, reward_funcs, dataset, tokenizer, tmp_path, **overrides):
    """A trainer for a seconds-long CPU run (`grpo_kwargs` plus ``overrides``); DAPOTrainer unless ``trainer_class``
    and ``config_class`` say otherwise; trainer-only keywords (``callbacks``, ``rollout_func``) pass through."""
    classes = {key: overrides.pop(key) for key in ("trainer_class", "config_class") if key in overrides}
    return build_tiny_trainer(model, reward_funcs, dataset, tokenizer, **classes, **grpo_kwargs(tmp_path, **overrides))


def add_eos_bias(model, eos_token_id: int, bias: float):
    """Give the tiny model's LM head a bias towards EOS so sampled completions have varied lengths.

    The new head shares the tied weight Parameter, so only the bias is new.
    """
    import torch
    from torch import nn

    head = model.lm_head
    biased = nn.Linear(head.in_features, head.out_features, bias=True)
    biased.weight = head.weight
    with torch.no_grad():
        biased.bias.zero_()
        biased.bias[eos_token_id] = bias
    model.lm_head = biased
    return model


def constant_reward(completions, **kwargs):
    """Every completion right: zero variance in every group."""
    return [1.0] * len(completions)


class RoundRecorder:
    """Wraps a trainer's `_generate_and_score_completions` and keeps each returned batch (tensors cloned)."""

    def __init__(self, trainer):
        self.batches = []
        self.rewards = []
        original = trainer._generate_and_score_completions

        def recorded(inputs):
            output = original(inputs)
            self.batches.append({k: v.clone() if hasattr(v, "clone") else v for k, v in output.items()})
            self.rewards.append(trainer._last_round.rewards_per_func.clone())
            return output

        trainer._generate_and_score_completions = recorded


def first_char_digit_reward(completions, **kwargs):
    """A binary reward whose pass rate varies by prompt for a random tiny model: the completion starts with a digit."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if t[:1].isdigit() else 0.0 for t in texts]
