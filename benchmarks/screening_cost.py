"""What screening costs as the trainer runs it: completions per informative group, at fixed pass rates.

Two measurements of one configuration (the one docs/choosing.md recommends: ``k = 4`` probes, the fixed budget,
no prompt-history skipping; ``G = 8``, 16 groups per step) on one synthetic task: every prompt has a fixed pass rate
drawn from `rollout_efficiency.screening_mix` ("atoms": 50% of plain GRPO's groups zero-variance), and a
completion is right with that chance, whatever it says.

* **trainer rule** (:func:`simulate`): the trainer's own decision code, `ScreeningCollector` with its
  `DynamicSampler` (planner, estimates, prompt history, refill stream), run against a stub trainer whose rounds draw
  rewards from the pass rates instead of generating. No model, so thousands of steps take seconds.
* **trainer** (:func:`train`): `DAPOTrainer` itself on a tiny model, the reward drawn the same way.

Both print completions generated per informative group in multiples of ``G`` (plain GRPO pays ``1 / (1 - 0.5)`` =
2 G here; 1 G is the floor), with a 95% interval over seeds.

    python benchmarks/screening_cost.py [--seeds 5] [--epochs 10] [--prompts 512] [--trainer]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import warnings
from collections import defaultdict, deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rollout_efficiency import screening_mix  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402
from trl.trainer.utils import RepeatSampler  # noqa: E402

from trl_dapo_ext import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_dapo_ext.dynamic_sampling.assembly import ScoredRound  # noqa: E402
from trl_dapo_ext.dynamic_sampling.rounds import PROMPT_INDEX_COLUMN, repeat_rows  # noqa: E402
from trl_dapo_ext.dynamic_sampling.sampler import DynamicSampler  # noqa: E402
from trl_dapo_ext.dynamic_sampling.screening_rounds import ScreeningCollector  # noqa: E402
from trl_dapo_ext.tiny import cpu_args  # noqa: E402

G, K, GROUPS = 8, 4, 16  # completions per group, probes per prompt, groups per step
RECOMMENDED = dict(dynamic_sampling_screen_generations=K, dynamic_sampling_fixed_budget=True)
PIPELINED = dict(dynamic_sampling_pipeline=True)  # with RECOMMENDED: one generation call per step


def pass_rates(prompts: int, seed: int, share: float = 0.5) -> np.ndarray:
    """Each prompt's fixed pass rate: the "atoms" mix whose plain groups of G are zero-variance with chance ``share``."""
    return screening_mix("atoms", share, G).draw(np.random.default_rng(seed), prompts)


@dataclass
class Cost:
    """What a run generated and how many informative groups it found (summed over its steps)."""

    completions: int = 0
    informative: int = 0  # informative groups found (trained on, or surplus)
    retained: int = 0  # informative groups trained on
    rounds: int = 0  # generation calls
    steps: int = 0
    screened: int = 0  # prompts that got probes
    dropped: int = 0  # screened prompts not completed
    agreeing_completed: int = 0  # prompts completed although their probes agreed
    skipped: int = 0  # refill prompts passed over by prompt-history skipping
    visits: int = 0  # prompts generated for at all
    over_budget: int = 0  # steps that generated more than the batch's rows (the fixed budget: must stay 0)
    short: int = 0  # steps that trained on fewer groups than the batch holds
    per_step: list[tuple[int, int]] = field(default_factory=list)  # (completions, informative groups) of each step
    calls: list[int] = field(default_factory=list)  # generation calls of each step

    def add(self, step: dict[str, int]) -> None:
        for name, value in step.items():
            setattr(self, name, getattr(self, name) + value)
        self.per_step.append((step["completions"], step["informative"]))
        self.calls.append(step.get("rounds", 0))
        self.steps += 1

    def calls_per_step(self, after: int = 10) -> float:
        """Generation calls per step, averaged over the steps after the first ``after`` (plain GRPO: 1)."""
        tail = self.calls[after:] or self.calls
        return sum(tail) / max(len(tail), 1)

    def in_g(self) -> float:
        """Completions per informative group, in multiples of ``G``."""
        return self.completions / max(self.informative, 1) / G


# --- the trainer's decision code on a stub trainer -------------------------------------------------------------------


class _Accelerator:
    num_processes, process_index, device = 1, 0, torch.device("cpu")

    @staticmethod
    def gather(tensor: torch.Tensor) -> torch.Tensor:
        return tensor


class StubTrainer:
    """What `ScreeningCollector` reads of a `DAPOTrainer`, with rounds that draw rewards instead of generating:
    a completion of prompt ``i`` is right with chance ``success[i]``."""

    def __init__(self, args: DAPOConfig, success: np.ndarray, seed: int):
        self.args, self.success = args, success
        self.num_generations = args.num_generations
        self.rng = np.random.default_rng(seed)
        self.train_dataset = [{"prompt": f"p{i}", "task": i} for i in range(len(success))]
        self.accelerator = _Accelerator()
        self.state = SimpleNamespace(global_step=0, max_steps=args.max_steps)
        self._step = 0  # TRL's micro-step count (gradient_accumulation_steps = steps_per_generation = 1 here)
        self._tokenizer = SimpleNamespace(pad_token_id=0)
        self.reward_func_names, self.task_reward_indices = ["pass_rate"], [0]
        self.reward_weights = torch.ones(1)
        self._metrics: dict[str, dict[str, list]] = {"train": {}}
        # TRL's completions-table buffers (pipelined screening carries each probe's entries to the step that trains it)
        table = args.generation_batch_size  # TRL's bound on each buffer
        self._logs: dict[str, Any] = {
            "prompt": deque(maxlen=table),
            "completion": deque(maxlen=table),
            "extra": defaultdict(lambda: deque(maxlen=table)),
        }
        self.log_completions = False
        self.callback_handler = SimpleNamespace(callbacks=[])
        self.dynamic_sampling = DynamicSampler(
            args,
            dataset_size=len(success),
            num_generations=self.num_generations,
            filter_indices=[0],
            reward_weights=self.reward_weights,
        )

    def _scored_round(self, rows: list[dict[str, Any]], need_rewards: bool = True):
        tasks = [row["task"] for row in rows]
        rewards = torch.tensor(self.rng.random(len(rows)) < self.success[tasks], dtype=torch.float32)[:, None]
        ones = torch.ones(len(rows), dtype=torch.long)
        self._logs["prompt"].extend(row["prompt"] for row in rows)  # as TRL writes each round's table entries
        self._logs["completion"].extend("" for _ in rows)
        scored = ScoredRound(rewards, [[1]] * len(rows), lengths=ones, truncated=torch.zeros_like(ones, dtype=bool))
        return {"completion_ids": ones[:, None]}, scored

    carried_logps_only = True  # as DAPOTrainer on one process

    def _record_old_logps(self, output: dict[str, Any]) -> None:
        pass  # pipelined screening's log-probabilities: no model here, and they steer no decision

    @staticmethod
    def _local_rows(global_rows: torch.Tensor, local_count: int) -> torch.Tensor:
        return global_rows[:local_count]


class CountingCollector(ScreeningCollector):
    """The trainer's collector, which reports its step's counts instead of assembling a batch."""

    agreeing_completed = 0

    def _complete_worthwhile(self, agreeing):
        dropped = super()._complete_worthwhile(agreeing)
        self.agreeing_completed += len(agreeing) - len(dropped)
        return dropped

    def _exhausted(self, retained_per_process: list[int]) -> None:
        pass  # counted as a short step instead

    def _finish(self) -> dict[str, int]:
        retained = min(self._kept_groups(), self.target)
        screened, dropped = self.funnel
        return {
            "completions": self.generated_rows,
            "informative": self.totals.informative,
            "retained": retained,
            "rounds": self.rounds,
            "screened": screened if self.units_to_complete else 0,
            "dropped": dropped,
            "agreeing_completed": self.agreeing_completed,
            "skipped": self.sampler.skip_counts.skipped,
            "visits": screened if self.units_to_complete else self.totals.attempted,
            "over_budget": int(self.fixed_budget and self.generated_rows > self.target * self.num_generations),
            "short": int(retained < self.target),
        }


def run_config(
    seed: int, steps: int, groups: int = GROUPS, generations: int = G, output_dir: str | None = None, **config: Any
) -> DAPOConfig:
    """The `DAPOConfig` of a benchmark run: ``groups`` groups of ``generations`` per step, ``steps`` steps, dynamic
    sampling with ``config`` (the stub trainer writes nothing: its folder is a throwaway)."""
    with tempfile.TemporaryDirectory() as folder:
        return DAPOConfig(
            **cpu_args(
                output_dir or folder,
                per_device_train_batch_size=groups * generations,
                num_generations=generations,
                max_completion_length=4,
                max_steps=steps,
                seed=seed,
                report_to=[],
                dynamic_sampling=True,
                **config,
            )
        )


def run_trainer_rule(
    success: np.ndarray,
    *,
    seed: int,
    steps: int,
    groups: int = GROUPS,
    generations: int = G,
    on_step=None,
    **config: Any,
) -> Cost:
    """``steps`` steps of the trainer's own collector (`ScreeningCollector`, its sampler, planner and estimates) with
    ``config`` (``DAPOConfig`` fields), each step's own prompts from shuffled passes over the dataset (as TRL's
    sampler gives them, from ``RepeatSampler`` seeded alike). ``on_step(step, success)``: a hook that may change the
    pass rates between steps."""
    args = run_config(seed, steps, groups, generations, **config)
    trainer = StubTrainer(args, success, seed=seed + 1)
    # The step's own prompts in the order TRL's dataloader gives them: its sampler, seeded by the run's seed.
    sampler = RepeatSampler(range(len(success)), mini_repeat_count=1, batch_size=groups, seed=seed)
    batches: list[int] = []
    cost = Cost()
    for step in range(steps):
        if on_step is not None:
            on_step(step, trainer.success)
        if len(batches) < groups:  # a new pass (the sampler drops an incomplete last batch, as TRL's does)
            batches = list(sampler)
        own, batches = batches[:groups], batches[groups:]
        rows = [{**trainer.train_dataset[i], PROMPT_INDEX_COLUMN: i} for i in own]
        trainer.state.global_step = trainer._step = step  # TRL's micro-step count: one micro-batch per step here
        cost.add(CountingCollector(trainer, repeat_rows(rows, generations)).collect())
    return cost


def simulate(seed: int, prompts: int = 512, epochs: float = 10.0, **overrides: Any) -> Cost:
    """The trainer's decision code on the synthetic task: ``epochs`` passes of the dataloader over ``prompts``."""
    steps = math.ceil(epochs * prompts / GROUPS)
    return run_trainer_rule(pass_rates(prompts, seed), seed=seed, steps=steps, **{**RECOMMENDED, **overrides})


# --- the trainer itself ----------------------------------------------------------------------------------------------


class PassRateReward:
    """A completion is right with its prompt's pass rate, whatever it says (seeded: runs are repeatable)."""

    __name__ = "pass_rate"

    def __init__(self, success: np.ndarray, seed: int):
        self.success, self.rng = success, np.random.default_rng(seed)

    def __call__(self, completions, task, **kwargs) -> list[float]:
        return (self.rng.random(len(task)) < self.success[list(task)]).astype(float).tolist()


def train(seed: int, prompts: int = 256, epochs: float = 4.0, **overrides: Any) -> Cost:
    """`DAPOTrainer` on a tiny model (learning rate 0: the pass rates stay fixed, as in :func:`simulate`)."""
    from datasets import Dataset

    from trl_dapo_ext.metric_names import N
    from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

    success = pass_rates(prompts, seed)
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, seed=seed, hidden_size=32, num_layers=1)
    dataset = Dataset.from_dict({"prompt": [f"p{i}:" for i in range(prompts)], "task": list(range(prompts))})
    with tempfile.TemporaryDirectory() as folder:
        args = run_config(
            seed,
            math.ceil(epochs * prompts / GROUPS),
            output_dir=folder,
            learning_rate=0.0,
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            **{**RECOMMENDED, **overrides},
        )
        trainer = DAPOTrainer(
            model, PassRateReward(success, seed + 1), args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    cost = Cost()
    for log in (h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h):
        informative = log[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] + log[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS]
        cost.add(
            {
                "completions": int(log[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS]),
                "informative": int(informative),
                "rounds": int(log[N.DYNAMIC_SAMPLING_ROUNDS]),
            }
        )
    return cost


T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # Student's t


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a t-based 95% interval over seeds (2 to 10 seeds).

    >>> mean, half = interval([1.0, 2.0, 3.0])  # sd 1, 3 seeds: t(2) = 4.303
    >>> mean, round(half, 3)
    (2.0, 2.484)
    """
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, float("nan")
    return mean, T_975[len(values) - 1] * float(np.std(values, ddof=1)) / math.sqrt(len(values))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=float, default=10.0, help="dataloader passes (trainer rule)")
    parser.add_argument("--prompts", type=int, default=512, help="dataset size (trainer rule)")
    parser.add_argument("--trainer", action="store_true", help="also run DAPOTrainer (256 prompts, 4 epochs)")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = {
        "GRPO's groups (trainer rule, fixed budget, no screening)": lambda seed: simulate(
            seed, options.prompts, options.epochs, dynamic_sampling_screen_generations=None
        ),
        f"screening k={K}, fixed budget (trainer rule)": lambda seed: simulate(seed, options.prompts, options.epochs),
        f"pipelined screening k={K}, fixed budget (trainer rule)": lambda seed: simulate(
            seed, options.prompts, options.epochs, **PIPELINED
        ),
        f"screening k={K}, refill (trainer rule)": lambda seed: simulate(
            seed, options.prompts, options.epochs, dynamic_sampling_fixed_budget=False
        ),
        f"pipelined screening k={K}, refill, fill chance 0.9 (trainer rule)": lambda seed: simulate(
            seed, options.prompts, options.epochs, dynamic_sampling_fixed_budget=False, **PIPELINED
        ),
        f"pipelined screening k={K}, refill, fill chance 0.5 (trainer rule)": lambda seed: simulate(
            seed,
            options.prompts,
            options.epochs,
            dynamic_sampling_fixed_budget=False,
            dynamic_sampling_carry_fill_chance=0.5,
            **PIPELINED,
        ),
    }
    if options.trainer:
        runs[f"screening k={K}, fixed budget (DAPOTrainer, 256 prompts, 4 epochs)"] = lambda seed: train(seed)
    if not 2 <= options.seeds <= 10:
        parser.error("--seeds must be between 2 and 10")
    print(f"k={K}, fixed budget, G={G}, {GROUPS} groups per step, atoms mix at 50% zero-variance; plain GRPO: 2.00 G")
    for name, run in runs.items():
        costs = [run(seed) for seed in range(options.seeds)]
        mean, half = interval([cost.in_g() for cost in costs])
        calls = float(np.mean([cost.calls_per_step() for cost in costs]))
        print(
            f"{name:13s} {mean:.2f} G per informative group (95% interval +-{half:.2f}, {options.seeds} seeds, "
            f"{costs[0].steps} steps each), {calls:.2f} generation calls per step after the first 10"
        )


if __name__ == "__main__":
    main()
