"""Step-time overhead of DAPOTrainer with diagnostics on, against plain trl.GRPOTrainer, in one run.

Both trainers train the same tiny local model on the same prompts with the same seed (dynamic sampling off, so no
extra generation). Trials alternate between the two to spread machine noise evenly; each trial's per-step times
are measured by a callback (optimizer step begin to end) after a warm-up, and the script prints the median step
time of each trainer and their ratio.

    python benchmarks/diagnostics_overhead.py [--trials 5] [--steps 20]

Target (issue 4): ratio <= 1.03.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from trl_dapo_ext import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


class StepClock(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def run_trial(extended: bool, steps: int, warmup: int, tokenizer, dataset) -> list[float]:
    common = dict(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=32,
        max_steps=steps + warmup,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    if extended:
        args = DAPOConfig(**common, diagnostics=True)
        trainer_cls = DAPOTrainer
    else:
        args = trl.GRPOConfig(**common)
        trainer_cls = trl.GRPOTrainer
    model = build_tiny_causal_lm(tokenizer, hidden_size=64, num_layers=2, seed=0)
    clock = StepClock()
    trainer = trainer_cls(
        model=model,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    return clock.times[warmup:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = build_char_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"{i}*{i % 9}=" for i in range(256)]})

    plain, extended = [], []
    for trial in range(options.trials):
        order = (False, True) if trial % 2 == 0 else (True, False)  # alternate who goes first
        for is_extended in order:
            times = run_trial(is_extended, options.steps, options.warmup, tokenizer, dataset)
            (extended if is_extended else plain).extend(times)
    plain_median, extended_median = statistics.median(plain), statistics.median(extended)
    print(f"trl {trl.__version__}, torch {torch.__version__}, {options.trials} trials x {options.steps} steps each")
    print(f"trl.GRPOTrainer                     median step {plain_median * 1000:8.2f} ms")
    print(f"DAPOTrainer(diagnostics=True)       median step {extended_median * 1000:8.2f} ms")
    print(f"overhead ratio (diagnostics / TRL)  {extended_median / plain_median:.3f}   (target <= 1.03)")


if __name__ == "__main__":
    main(sys.argv[1:])
