"""Fixtures shared by the suite: a character tokenizer, tiny Qwen2 models and small datasets, all built locally."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
import trl115_cpu_shim  # noqa: E402
from datasets import Dataset

from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

trl115_cpu_shim.install_if_needed()

# Two torch threads on a busy 2-core machine run far slower than one.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture
def make_model(tokenizer):
    """Factory: a fresh tiny model with fixed initial weights (same seed, same weights)."""

    def make(seed: int = 0, **kwargs):
        kwargs.setdefault("hidden_size", 32)
        kwargs.setdefault("num_layers", 1)
        return build_tiny_causal_lm(tokenizer, seed=seed, **kwargs)

    return make


@pytest.fixture
def prompt_dataset():
    """24 plain-text prompts with an integer `answer` column."""
    return Dataset.from_dict(
        {"prompt": [f"{i}+{i % 7}=" for i in range(24)], "answer": [str(i + i % 7) for i in range(24)]}
    )
