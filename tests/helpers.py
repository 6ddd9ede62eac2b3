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
