"""Shared pieces of the backend lane: a reward that makes half the prompt groups zero-variance, the dataset, the
config of a seconds-long vLLM colocate run, and a recorder of TRL's per-round sampling metrics."""

from __future__ import annotations

from datasets import Dataset

LOGP_DIFF = "sampling/sampling_logp_difference/mean"
# Mean |log p_policy - log p_vLLM| over sampled tokens. With the weights in sync it stays near 1e-3 here (fp32, a
# different kernel than the trainer's); a stale or wrong policy in vLLM gives 0.05 and more after one update at this
# learning rate (measured: docs/backends.md).
LOGP_TOLERANCE = 0.01


def kind_reward(completions, kind, **kwargs):
    """Constant on "flat" prompts (a zero-variance group, which dynamic sampling drops), the share of digits in the
    completion on "varied" prompts (varies within a group of random completions)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if k == "flat" else sum(ch.isdigit() for ch in t) / max(len(t), 1) for t, k in zip(texts, kind)]


def kind_rows(count: int = 32) -> list[dict]:
    """Plain-text addition prompts, every other one "flat"."""
    return [{"prompt": f"{a}+{a % 7}=", "kind": "flat" if a % 2 else "varied"} for a in range(10, 10 + count)]


def kind_dataset(count: int = 32) -> Dataset:
    return Dataset.from_list(kind_rows(count))


def colocate_kwargs(output_dir, **overrides) -> dict:
    """Config kwargs (trl.GRPOConfig and DAPOConfig alike) for a 3-step CPU run generating with vLLM colocate."""
    kwargs = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        learning_rate=5e-3,  # large: the policy moves enough each step that stale vLLM weights would show
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=7,
        disable_tqdm=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_enable_sleep_mode=False,  # CUDA-only in vLLM
        vllm_max_model_length=64,
    )
    kwargs.update(overrides)
    return kwargs


class RoundLog:
    """Every generation round's logp difference, grouped by optimizer step.

    TRL appends one value per ``_generate_and_score_completions`` call (a dynamic-sampling round) and averages them
    when it logs; this reads the raw list just before, so one bad round cannot hide in a step's mean.
    """

    def __init__(self, trainer):
        self.steps: list[list[float]] = []
        self.rounds: list[int] = []
        original = trainer.log

        def log(logs, *args, **kwargs):
            metrics = trainer._metrics["train"]
            if metrics.get(LOGP_DIFF):
                self.steps.append(list(metrics[LOGP_DIFF]))
                rounds = metrics.get("dynamic_sampling/rounds")
                self.rounds.append(int(rounds[-1]) if rounds else 1)
            return original(logs, *args, **kwargs)

        trainer.log = log

    @property
    def values(self) -> list[float]:
        return [value for step in self.steps for value in step]
