"""Step-time overhead of DAPOTrainer with diagnostics on, against plain trl.GRPOTrainer, in one run.

Both trainers train the same tiny local model on the same prompts with the same seed (dynamic sampling off, so no
extra generation). Trials alternate between the two to spread machine noise evenly; each trial's per-step times
are measured by a callback (optimizer step begin to end) after a warm-up, and the script prints the median step
time of each trainer and their ratio.

    python benchmarks/diagnostics_overhead.py [--trials 5] [--steps 20]

Target (issue 4): ratio <= 1.03. On a shared machine the whole-step ratios move by +-10% between runs (the three
trainers do identical work: same completions, same losses), so the script also times the diagnostics code itself
inside each step, which is the overhead the ratio tries to see.
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
from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm, build_tiny_trainer, cpu_args  # noqa: E402


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


class StepClock(TrainerCallback):
    """Wall and CPU time of each optimizer step (CPU time is less disturbed by other load on a shared machine)."""

    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        wall, cpu = self._start
        self.times.append((time.perf_counter() - wall, time.process_time() - cpu))


def run_trial(variant: str, steps: int, warmup: int, tokenizer, dataset) -> list[float]:
    common = cpu_args(
        tempfile.mkdtemp(),
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=32,
        max_steps=steps + warmup,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    if variant != "trl":
        classes = dict(trainer_class=DAPOTrainer, config_class=DAPOConfig, diagnostics=variant == "diagnostics")
    else:
        classes = dict(trainer_class=trl.GRPOTrainer, config_class=trl.GRPOConfig)
    model = build_tiny_causal_lm(tokenizer, hidden_size=64, num_layers=2, seed=0)
    clock = StepClock()
    trainer = build_tiny_trainer(model, digit_reward, dataset, tokenizer, callbacks=[clock], **classes, **common)
    if variant == "diagnostics":  # time the diagnostics code itself, directly
        trainer._log_diagnostics = _timed(trainer._log_diagnostics, DIRECT)
    trainer.train()
    return clock.times[warmup:]


DIRECT: list[float] = []  # seconds spent inside DAPOTrainer._log_diagnostics, one entry per call


def _timed(function, sink: list[float]):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)

    return wrapper


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = build_char_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"{i}*{i % 9}=" for i in range(256)]})

    variants = ("trl", "dropin", "diagnostics")
    times: dict[str, list[float]] = {variant: [] for variant in variants}
    for trial in range(options.trials):
        order = variants if trial % 2 == 0 else variants[::-1]  # alternate who goes first
        for variant in order:
            times[variant].extend(run_trial(variant, options.steps, options.warmup, tokenizer, dataset))
    wall = {variant: statistics.median(t[0] for t in values) for variant, values in times.items()}
    cpu = {variant: statistics.median(t[1] for t in values) for variant, values in times.items()}
    print(f"trl {trl.__version__}, torch {torch.__version__}, {options.trials} trials x {options.steps} steps each")
    print("                                     median step: wall ms   CPU ms")
    for variant, label in (
        ("trl", "trl.GRPOTrainer"),
        ("dropin", "DAPOTrainer, defaults (drop-in)"),
        ("diagnostics", "DAPOTrainer(diagnostics=True)"),
    ):
        print(f"{label:<37} {wall[variant] * 1000:17.2f} {cpu[variant] * 1000:8.2f}")
    direct = statistics.median(DIRECT)
    print(
        f"diagnostics code per step (measured inside the step): median {direct * 1000:.2f} ms = "
        f"{direct / wall['diagnostics']:.1%} of a step"
    )
    for variant in ("dropin", "diagnostics"):
        print(
            f"ratio {variant} / TRL: wall {wall[variant] / wall['trl']:.3f}, CPU {cpu[variant] / cpu['trl']:.3f}"
            + ("   (target <= 1.03)" if variant == "diagnostics" else "")
        )


if __name__ == "__main__":
    main(sys.argv[1:])
