"""What the real-model lane trains on and records: simple addition questions as chat messages, the DAPO config of
a one-to-two-minute CPU run with LoRA, and recorders of what the rewards saw and what the loss got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset

from reward_funcs import math_answer_format_reward, math_reward
from trl_dapo_ext.tiny import cpu_args

PAIRS = [(2, 3), (4, 5), (7, 1), (6, 2), (3, 3), (8, 1), (5, 4), (9, 0)]
QUESTION = "What is {a} + {b}? Put your final answer in \\boxed{{}}."
MAX_COMPLETION = 48
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def chat_dataset() -> Dataset:
    """Conversational prompts (a list of messages, no system turn: SmolLM2's template adds its own)."""
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": QUESTION.format(a=a, b=b)}], "answer": str(a + b)} for a, b in PAIRS]
    )


def lane_config(output_dir, **overrides) -> dict[str, Any]:
    """2 prompts x 4 completions of at most 48 tokens per step; dynamic sampling with fixed round sizes (refill
    rounds cost ~12 s each here) and 'fill' so that a step whose rounds find too few informative groups still
    trains; a checkpoint every step."""
    return cpu_args(
        output_dir,
        **{
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": MAX_COMPLETION,
            "temperature": 0.7,  # at 1.0 this 135M model mostly rambles; at 0.7 about half the groups vary
            "overlong_buffer_length": 16,
            "dynamic_sampling": True,
            "dynamic_sampling_oversample": 1.0,
            "dynamic_sampling_max_rounds": 3,
            "dynamic_sampling_on_exhausted": "fill",
            "diagnostics": True,
            "learning_rate": 1e-3,
            "max_steps": 2,
            "logging_steps": 1,
            "save_strategy": "steps",
            "save_steps": 1,
            "seed": 0,
            "disable_tqdm": True,
            **overrides,
        },
    )


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")


class RecordingReward:
    """A reward function that keeps every (completion text, completion ids) pair TRL scored, then delegates."""

    def __init__(self, inner):
        self.inner = inner
        self.__name__ = inner.__name__  # TRL names the metric after it: the same rewards/<name>/ keys
        self.seen: list[tuple[str, list[int]]] = []

    def __call__(self, completions, completion_ids, **kwargs):
        for completion, ids in zip(completions, completion_ids, strict=True):
            self.seen.append((completion[-1]["content"], list(ids)))
        return self.inner(completions, completion_ids=completion_ids, **kwargs)


def reward_funcs() -> list:
    return [math_reward, RecordingReward(math_answer_format_reward)]


@dataclass
class BatchLog:
    """Every update batch `_generate_and_score_completions` returned (after dynamic sampling's assembly)."""

    batches: list[dict[str, Any]] = field(default_factory=list)

    def attach(self, trainer) -> BatchLog:
        original = trainer._generate_and_score_completions

        def recorded(inputs):
            output = original(inputs)
            self.batches.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in output.items()})
            return output

        trainer._generate_and_score_completions = recorded
        return self


def split_parameters(model) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(LoRA adapter tensors, base tensors) of a PEFT model, cloned."""
    adapter, base = {}, {}
    for name, parameter in model.named_parameters():
        (adapter if "lora_" in name else base)[name] = parameter.detach().clone()
    return adapter, base
