"""Refill strategies inside the real trainer: the demo's tiny model, from one warm start, for a few hundred steps.

The simulator (`rollout_efficiency.py`) compares strategies on idealised prompts; this script checks that the
trainer behaves the same way on a real (tiny) policy that learns while it samples. Every variant trains from the same
warm start with the same seed, the library's `math_reward`, 16 groups of 8 completions per step:

* fixed 3x: a first round three times the batch (DAPO / veRL's recipe), later rounds sized from the retention;
* fixed 1x: the batch's own prompts first, then rounds sized from the observed retention (close to one-by-one
  replacement, but batched);
* planner, confidence 0.95: the fill-chance rule (the default before the cost-aware planner);
* cost-aware, measured: the default planner, its round latency fitted online from this run's own round times;
* cost-aware + skip, measured: the same with prompt-history skipping (window 1, floor 0.1);
* GRPO's groups: the fixed budget without screening, which generates exactly what plain GRPO generates (one round of
  the batch's own groups), so its completions per informative group are GRPO's;
* screening k=4 / k=2: probes of k completions, mixed prompts completed to G=8 (with refill to a full batch);
* screening k=4, fixed budget: at most GRPO's completions per step, the groups not found masked.

It prints completions generated per retained group and per informative group (retained or surplus; as multiples
of G, whose floor is 1: plain GRPO pays 1 / its informative share), rounds per step, discarded surplus groups
per step and the measured seconds of generation and scoring per retained group, and the round cost the run measured
(fixed latency and seconds per completion, fitted over every variant's rounds). Seconds depend on the machine and
its load: compare rows of one run only.

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
from trl_dapo_ext.dynamic_sampling.planner import RoundCostModel  # noqa: E402
from trl_dapo_ext.metric_names import N  # noqa: E402

VARIANTS = {
    "fixed 3x (veRL recipe)": dict(dynamic_sampling_oversample=3.0),
    "fixed 1x, then refill": dict(dynamic_sampling_oversample=1.0),
    "planner, confidence 0.95": dict(dynamic_sampling_confidence=0.95),
    "cost-aware, measured": dict(dynamic_sampling_measure_latency=True),
    "cost-aware + skip, measured": dict(
        dynamic_sampling_measure_latency=True, dynamic_sampling_skip_window=1, dynamic_sampling_skip_floor=0.1
    ),
    "GRPO's groups (no refill)": dict(dynamic_sampling_fixed_budget=True),
    "screening k=4": dict(dynamic_sampling_screen_generations=4),
    "screening k=2": dict(dynamic_sampling_screen_generations=2),
    "screening k=4, fixed budget": dict(dynamic_sampling_screen_generations=4, dynamic_sampling_fixed_budget=True),
}


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when nothing was retained (a warm start too weak to solve anything)."""
    return numerator / denominator if denominator else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), help="default: every variant")
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
    print(
        f"{'variant':<28} {'completions/retained':>21} {'per informative':>16} {'rounds/step':>12} "
        f"{'surplus/step':>13} {'s/retained':>11} {'latency':>8}"
    )
    every_round = RoundCostModel(window=100_000)  # all variants' rounds: the machine's round cost
    for name, features in VARIANTS.items():
        if options.variants and name not in options.variants:
            continue
        model.load_state_dict(warm_state)
        torch.manual_seed(settings.seed)
        args = DAPOConfig(
            **{**common_args(tempfile.mkdtemp(), settings.seed), "logging_steps": 1},
            max_steps=options.steps,
            per_device_train_batch_size=128,
            num_generations=8,
            max_completion_length=6,
            learning_rate=4e-4,  # the demo's RL lr when the table in docs/dynamic-sampling.md was measured
            lr_scheduler_type="constant",
            save_strategy="no",
            disable_tqdm=True,
            dynamic_sampling=True,
            dynamic_sampling_max_rounds=10,
            dynamic_sampling_on_exhausted="fill",  # a step the rounds cannot fill trains masked, not stops
            **features,
        )
        trainer = DAPOTrainer(
            model=model, reward_funcs=math_reward, args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)  # one line per step would bury the table
        trainer.train()
        logs = [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h]
        generated = sum(h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] for h in logs)
        retained = sum(h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] for h in logs)
        informative = retained + sum(h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS] for h in logs)
        rounds = sum(h[N.DYNAMIC_SAMPLING_ROUNDS] for h in logs) / len(logs)
        surplus = sum(h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS] for h in logs) / len(logs)
        seconds = sum(h[N.DYNAMIC_SAMPLING_GENERATION_SECONDS] for h in logs)
        latency = logs[-1].get(N.DYNAMIC_SAMPLING_ROUND_LATENCY, float("nan"))
        latency_text = f"{latency:>8.1f}" if "measured" in name else f"{'':>8}"
        print(
            f"{name:<28} {ratio(generated, retained * 8):>20.2f}x {ratio(generated, informative * 8):>15.2f}x "
            f"{rounds:>12.2f} "
            f"{surplus:>13.2f} "
            f"{ratio(seconds, retained):>11.4f} {latency_text}"
        )
        if trainer.dynamic_sampling.planner is not None:
            for completions, round_seconds in trainer.dynamic_sampling.planner.cost_model.rounds:
                every_round.observe(completions, round_seconds)
    print(
        f"round cost measured over {len(every_round.rounds)} planner rounds: {every_round.latency():.1f} "
        f"completion-equivalents of fixed latency, {every_round.seconds_per_completion() * 1000:.2f} ms per completion"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
