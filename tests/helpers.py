"""Plain helpers shared by test modules (import as `from helpers import ...`)."""

from __future__ import annotations


def digit_fraction_reward(completions, **kwargs):
    """A dense reward that varies within groups of random completions: share of digit characters."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def grpo_kwargs(tmp_path, **overrides):
    """Config kwargs for a seconds-long CPU run that works with trl.GRPOConfig and DAPOConfig alike."""
    kwargs = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        learning_rate=5e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=7,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return kwargs


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
