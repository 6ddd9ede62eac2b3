"""Refill strategies inside the real trainer: the demo's tiny model, from one warm start, for a few hundred steps.

The simulator (`rollout_efficiency.py`) compares strategies on idealised prompts; this script checks that the
trainer behaves the same way on a real (tiny) policy that learns while it samples. Every variant trains from the same
warm start with the same seed, the library's `math_reward`, 16 groups of 8 completions per step:

* fixed 3x: a first round three times the batch (DAPO / veRL's recipe), later rounds sized from the retention;
* fixed 1x: the batch's own prompts first, then rounds sized from the observed retention (close to one-by-one
  replacement, but batched);
* planner: the adaptive planner (the defaults: confidence 0.95, retention decay 0.8, prompts in strata by their
  predicted retention);
* planner, confidence 0.99: the same, trading surplus for fewer second rounds;
* planner, confidence 0.99, decay 0.95: also a longer memory of the retention per stratum;
* planner + skip: the planner with prompt-history skipping (window 1, floor 0.1).

It prints completions generated per retained group (as a multiple of G), rounds per step and discarded surplus
groups per step. Fewer, noisier numbers than the simulator.

    python benchmarks/rollout_efficiency_trainer.py [--steps 150] [--sft-steps 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402

from reward_funcs import math_reward  # noqa: E402
from trl_dapo_ext import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_dapo_ext.cli.demo import (  # noqa: E402
    DemoSettings,
    build_tokenizer_and_model,
    common_args,
    make_problems,
    warm_start,
)

VARIANTS = {
    "fixed 3x (veRL recipe)": dict(dynamic_sampling_oversample=3.0),
    "fixed 1x, then refill": dict(dynamic_sampling_oversample=1.0),
    "planner": dict(),
    "planner, confidence 0.99": dict(dynamic_sampling_confidence=0.99),
    "planner, 0.99, decay 0.95": dict(dynamic_sampling_confidence=0.99, dynamic_sampling_retention_decay=0.95),
    "planner + skip": dict(dynamic_sampling_skip_window=1, dynamic_sampling_skip_floor=0.1),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sft-steps", type=int, default=200)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)

    # A fixed warm start (no target accuracy), as when the README table was measured.
    settings = DemoSettings(output_dir=tempfile.mkdtemp(), sft_steps=options.sft_steps, warm_start_target=None)
    problems = make_problems(settings.num_problems, settings.seed)[settings.held_out :]
    sft_rows, rl_rows = problems[: len(problems) // 2], problems[len(problems) // 2 :]
    tokenizer, model = build_tokenizer_and_model(settings.model_size, settings.seed)
    warm_start(model, tokenizer, sft_rows, settings)
    warm_state = {key: value.clone() for key, value in model.state_dict().items()}
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rl_rows])

    print(f"{options.steps} RL steps per variant, 16 groups of G=8 per step, the demo's warm start")
    print(f"{'variant':<26} {'completions / retained group':>30} {'rounds / step':>14} {'surplus / step':>15}")
    for name, features in VARIANTS.items():
        model.load_state_dict(warm_state)
        torch.manual_seed(settings.seed)
        args = DAPOConfig(
            **{**common_args(tempfile.mkdtemp(), settings.seed), "logging_steps": 1},
            max_steps=options.steps,
            per_device_train_batch_size=128,
            num_generations=8,
            max_completion_length=6,
            learning_rate=settings.learning_rate,
            lr_scheduler_type="constant",
            save_strategy="no",
            disable_tqdm=True,
            dynamic_sampling=True,
            dynamic_sampling_max_rounds=10,
            **features,
        )
        trainer = DAPOTrainer(
            model=model, reward_funcs=math_reward, args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)  # one line per step would bury the table
        trainer.train()
        logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
        generated = sum(h["dynamic_sampling/generated_completions"] for h in logs)
        retained = sum(h["dynamic_sampling/retained_groups"] for h in logs)
        rounds = sum(h["dynamic_sampling/rounds"] for h in logs) / len(logs)
        surplus = sum(h["dynamic_sampling/discarded_surplus_groups"] for h in logs) / len(logs)
        print(f"{name:<26} {generated / retained / 8:>28.2f}x {rounds:>14.2f} {surplus:>15.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
