"""Does DAPO pay for its rollouts? Two tasks, DAPO's cumulative arms and every way of choosing groups, equal budgets.

DAPO's Table 1 (Yu et al. 2025) adds its components to GRPO one at a time and compares them at equal optimizer steps;
dynamic sampling, its largest gain (+8 points AIME 2024), generates more completions per step than the others. This
benchmark compares the arms at an equal number of generated completions instead, with the demo's model, warm start
and paired held-out evaluation, on one of two tasks (`ablation_tasks.py`): ``demo``, `trl-dapo demo`'s two-digit
additions, where most groups have mixed rewards, and ``mixed``, easy / medium / hard classes where most of GRPO's
groups are all right or all wrong, as in math RL (accuracy per class as well). It also records accuracy at equal
wall and CPU time. Arms, each a config change only:

1. GRPO as TRL documents it: ``loss_type="grpo"``, symmetric clip (0.2), ``scale_rewards="group"``;
2. + clip-higher: ``epsilon_high=0.28``;
3. + token-level loss: ``loss_type="dapo"``;
4. + dynamic sampling (the adaptive planner at its defaults) = DAPO;
5. DAPO + the leave-one-out baseline without scaling (``advantage_estimator="loo"``, ``scale_rewards="none"``);
6. DAPO + prompt-history skipping (``dynamic_sampling_skip_window=1``);
7. GRPO's groups with the zero-variance ones masked, no refill (``dynamic_sampling_fixed_budget=True``);
8. screening, k=4 probes, with refill (``dynamic_sampling_screen_generations=4``);
9. screening, k=4, within GRPO's per-step budget (both).

Every run of a seed starts from the same warm-started policy (trained once per seed, saved in ``DIR/warm/``), trains
until it has generated ``--budget`` completions (default: what arm 1 generates in the demo's RL phase, 500 steps x 16
prompts x 8 = 64,000) and is evaluated every ``--eval-every`` completions on the same held-out samples with the same
random numbers. ``DIR/results.json`` keeps one record per run, and a rerun of the same command skips the runs it
holds; ``DIR/results.md`` and ``DIR/ablation.png`` summarise them.

    PYTHONPATH=. python benchmarks/ablation.py --output runs/ablation              # 5 seeds x 9 arms
    PYTHONPATH=. python benchmarks/ablation.py --output runs/ablation --jobs 2     # two runs at once, 1 thread each
    PYTHONPATH=. python benchmarks/ablation.py --output /tmp/ablation-smoke --smoke  # 2 arms x 1 seed, minutes
    PYTHONPATH=. python benchmarks/ablation.py --task mixed --arms selection --output runs/mixed  # arms 1 3 4 6-9
    PYTHONPATH=. python benchmarks/ablation.py --merge runs/all runs/a runs/b    # runs made apart (e.g. per kernel path)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

# One thread per run (set before torch loads, and inherited by the spawned workers): two threads beside any other
# busy process run 6-8x slower on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ablation_tasks import TASKS, task_settings  # noqa: E402  (beside this script)

from trl_dapo_ext.cli.demo import DemoSettings  # noqa: E402  (light: the demo imports torch and TRL lazily)

RESULTS = "results.json"
PER_STEP_COLUMNS = ("completions", "generation_calls", "decode_steps", "cpu_s", "wall_s")  # a record's per_step
TABLE = "results.md"
PLOT = "ablation.png"

# ---------------------------------------------------------------------------------------------------------------------
# Arms: cumulative, as in DAPO's Table 1; each is a DAPOConfig change on top of the demo's RL recipe
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    number: int
    name: str
    config: dict[str, Any]


# TRL's GRPO: the per-sequence length-normalised loss, the same clip range on both sides, rewards scaled by the
# group's std and every group trained on (TRL's default loss_type is "dapo", so arm 1 sets "grpo" explicitly).
_GRPO: dict[str, Any] = dict(
    loss_type="grpo", epsilon=0.2, epsilon_high=None, scale_rewards="group", dynamic_sampling=False
)
_CLIP_HIGHER = {**_GRPO, "epsilon_high": 0.28}  # DAPO Sec. 3.1
_TOKEN_LOSS = {**_CLIP_HIGHER, "loss_type": "dapo"}  # DAPO Sec. 3.3
# DAPO Sec. 3.2, with the package's adaptive planner at its defaults. "fill" instead of the default "error" when a
# step's round budget runs out: a run of an hour must not die on one unlucky step (filled groups are masked out of
# the loss and counted in the record).
_DAPO = {**_TOKEN_LOSS, "dynamic_sampling": True, "dynamic_sampling_on_exhausted": "fill"}
_SCREEN_BUDGET = {"dynamic_sampling_screen_generations": 4, "dynamic_sampling_fixed_budget": True}
_PIPELINE = {"dynamic_sampling_pipeline": True}

ARMS: dict[int, Arm] = {
    arm.number: arm
    for arm in (
        Arm(1, "GRPO (TRL)", _GRPO),
        Arm(2, "+ clip-higher", _CLIP_HIGHER),
        Arm(3, "+ token-level loss", _TOKEN_LOSS),
        Arm(4, "+ dynamic sampling = DAPO", _DAPO),
        # The unbiased baseline: each reward minus the mean of its G-1 siblings, not divided by a std (which
        # up-weights groups of nearly equal rewards); see docs/estimators.md.
        Arm(5, "DAPO + leave-one-out, unscaled", {**_DAPO, "advantage_estimator": "loo", "scale_rewards": "none"}),
        # Window 1, floor 0.1: the setting benchmarks/rollout_efficiency_trainer.py measured.
        Arm(6, "DAPO + prompt-history skipping", {**_DAPO, "dynamic_sampling_skip_window": 1}),
        # Selection without refill: GRPO's own groups (one round, B x G completions), the zero-variance ones masked
        # out of the loss and its denominator. Separates "no dilution" from refilling.
        Arm(7, "drop zero-variance, no refill", {**_DAPO, "dynamic_sampling_fixed_budget": True}),
        # Screening (SPEED-RL's k=4): probes first, full groups only where they can teach; refill to a full batch.
        Arm(8, "screening k=4 + refill", {**_DAPO, "dynamic_sampling_screen_generations": 4}),
        # The same within GRPO's per-step budget: GRPO's completions and optimizer steps, more informative groups.
        Arm(9, "screening k=4, GRPO's budget", {**_DAPO, **_SCREEN_BUDGET}),
        # Arm 9 in one generation call per step (SPEED-RL's pipelining): a step completes the prompts the previous
        # step's call probed and probes the next step's; the protocol's primary arm (benchmarks/protocol.md).
        Arm(10, "pipelined screening k=4, GRPO's budget", {**_DAPO, **_SCREEN_BUDGET, **_PIPELINE}),
        Arm(
            11,
            "pipelined screening k=2, GRPO's budget",
            {**_DAPO, **_SCREEN_BUDGET, **_PIPELINE, "dynamic_sampling_screen_generations": 2},
        ),
    )
}
# The arms of the selection comparison (`--arms selection`): GRPO, GRPO with DAPO's loss (what the selection arms
# share), and every way of choosing groups.
SELECTION_ARMS = [1, 3, 4, 6, 7, 8, 9]
# The arms of benchmarks/protocol.md (`--arms protocol`): the primary pair (3 and 10), then the secondaries.
PROTOCOL_ARMS = [3, 10, 1, 4, 7, 11, 8]
ARM_GROUPS = {"selection": SELECTION_ARMS, "protocol": PROTOCOL_ARMS}

# Not arms: DAPO's overlong filtering (`mask_truncated_completions`) and soft overlong punishment
# (`overlong_buffer_length`) act on completions cut off at the length limit. Here a well-formed completion is at most
# 5 of the 6 allowed tokens (`#### `, up to three digits, <eos>), so only malformed ones are ever cut off: both would
# change nothing DAPO meant them to change (the mixed task's four-digit sums fill the 6 tokens exactly). Each record
# carries the measured truncated share to show it.
NOT_RUN_NOTE = (
    "Overlong filtering (`mask_truncated_completions`) and soft overlong punishment (`overlong_buffer_length`) are "
    "not arms: they act on completions cut off at the length limit, and here a well-formed completion fits in the 6 "
    "allowed tokens (`#### `, up to four digits, `<eos>`), so only malformed completions are ever cut off (the "
    "truncated share per arm is in the last table)."
)


# ---------------------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What every run of one ablation shares: the demo's settings, the budget, the evaluation grid, the threads."""

    demo: dict[str, Any]
    budget: int
    eval_every: int
    threads: int = 1
    smoke: bool = False
    task: str = "demo"
    held_out_per_class: int | None = None  # the scratchpad task's (None: the task's own, 1,000)

    @property
    def completions_per_step(self) -> int:
        return self.demo["prompts_per_step"] * self.demo["num_generations"]


def default_budget(settings: DemoSettings) -> int:
    """What arm 1 generates in the demo's RL phase: steps x prompts x G (without dynamic sampling, every step's)."""
    return settings.rl_steps * settings.prompts_per_step * settings.num_generations


def demo_settings(smoke: bool, task: str = "demo") -> DemoSettings:
    """The demo's full settings with ``task``'s changes, on one thread; ``smoke``: a fixed short warm start and 2
    samples per problem.

    The smoke run keeps the model size and the data split (the scratchpad task's held-out split aside: `SMOKE`), so
    it exercises the same pipeline at a fraction of the cost; its accuracies mean nothing.
    """
    settings = DemoSettings(output_dir="", threads=1, **task_settings(task))
    if smoke:
        settings.warm_start_target, settings.sft_steps, settings.eval_samples = None, 150, 2
    return settings


SMOKE = dict(arms=[1, 4], seeds=[0], budget=16 * 128, eval_every=512, scratchpad_held_out_per_class=50)


# ---------------------------------------------------------------------------------------------------------------------
# Workers: one warm start or one run per spawned process, one torch thread
# ---------------------------------------------------------------------------------------------------------------------


def _worker_setup(log_path: Path, threads: int) -> None:
    """Send this process's output (TRL's and torch's included) to ``log_path``; torch on ``threads`` threads."""
    import torch

    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def warm_dir(output: Path, seed: int) -> Path:
    """Where a seed's warm-started policy, its log and ``warm.json`` live."""
    return output / "warm" / f"seed{seed}"


def warm_start_seed(output: str, seed: int, plan: dict) -> dict:
    """The demo's warm start for ``seed``, saved once in ``DIR/warm/seedN``, and the held-out evaluation before RL."""
    plan_ = Plan(**plan)
    folder = warm_dir(Path(output), seed)
    _worker_setup(folder / "log.txt", plan_.threads)
    from ablation_tasks import evaluate_by_class, task_splits
    from safetensors.torch import save_model

    from reward_funcs import math_reward
    from trl_dapo_ext.cli.demo import build_tokenizer_and_model, warm_start

    settings = DemoSettings(**{**plan_.demo, "output_dir": str(folder), "seed": seed})
    splits = task_splits(plan_.task, settings, plan_.held_out_per_class)
    tokenizer, model = build_tokenizer_and_model(settings.model_size, seed)
    started, checks = time.perf_counter(), []
    sft_steps = warm_start(
        model,
        tokenizer,
        splits.sft_rows,
        settings,
        check_rows=splits.check_rows or None,
        on_check=lambda step, accuracy: checks.append([step, accuracy]),
    )
    seconds = time.perf_counter() - started
    before = evaluate_by_class(
        model, tokenizer, splits.held_out, settings.eval_samples, seed, math_reward, settings.completion_tokens
    )
    save_model(model, str(folder / "model.safetensors"))  # the embedding and the output layer are tied: one tensor
    info = dict(
        seed=seed,
        sft_steps=sft_steps,
        sft_seconds=seconds,
        sft_checks=checks,  # [step, greedy accuracy on the target's check problems] at each check
        accuracy_before=before["overall"],
        accuracy_before_by_class=before["by_class"],
        demo=plan_.demo,
        task=plan_.task,
    )
    (folder / "warm.json").write_text(json.dumps(info, indent=2))  # written last: its presence means complete
    return info


class GenerationMeter:
    """Wraps the verifier and meters what generation cost: the trainer scores each generation call's completions in
    one call, so per call it counts the completions' tokens (TRL's ``completion_ids``, ``<eos>`` included) and the
    longest completion's, whose decode a batched call on a GPU waits for (``decode_steps``: the modelled GPU time)."""

    def __init__(self, reward_func: Callable) -> None:
        self.reward_func = reward_func
        self.__name__ = getattr(reward_func, "__name__", "reward")  # the reward's metric names stay the verifier's
        self.calls = self.completions = self.tokens = self.decode_steps = 0

    def __call__(self, completions: list, completion_ids: list[list[int]] | None = None, **kwargs: Any) -> list:
        if completion_ids is None:
            raise TypeError("GenerationMeter needs the trainer's completion_ids (TRL passes them to reward functions)")
        lengths = [len(ids) for ids in completion_ids]
        self.calls += 1
        self.completions += len(lengths)
        self.tokens += sum(lengths)
        self.decode_steps += max(lengths, default=0)
        return self.reward_func(completions, completion_ids=completion_ids, **kwargs)

    def counts(self) -> dict[str, int]:
        """What a curve point records of generation so far."""
        return dict(generated_tokens=self.tokens, generation_calls=self.calls, decode_steps=self.decode_steps)


def _budget_callback(budget: int, eval_every: int, trainer, evaluate_now: Callable[[], dict], meter: GenerationMeter):
    """Evaluates every ``eval_every`` completions and at the end of the budget (the trainer stops there itself:
    ``max_generated_completions``).

    ``trainer.generated_completions`` is every generation round's completions, whether a group reaches the update
    batch or is dropped by dynamic sampling: the generation cost of every arm. Training time excludes the
    evaluations, which cost every arm the same.
    """
    from transformers import TrainerCallback

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.curve: list[dict] = []
            self.next_eval = eval_every
            self.eval_seconds = self.eval_cpu = 0.0
            self.completions_before_last_step = 0
            # [completions, generation calls, decode steps, CPU s, wall s] at each step's end, cumulative and
            # evaluations excluded: steady-state costs per step (benchmarks/pipeline_cost.py)
            self.per_step: list[list[float]] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.started, self.cpu_started = time.perf_counter(), time.process_time()

        def on_step_begin(self, args, state, control, **kwargs):
            self.completions_before_last_step = trainer.generated_completions

        def training_seconds(self) -> tuple[float, float]:
            wall = time.perf_counter() - self.started - self.eval_seconds
            return wall, time.process_time() - self.cpu_started - self.eval_cpu

        def point(self, steps: int) -> None:
            wall, cpu = self.training_seconds()
            started, cpu_started = time.perf_counter(), time.process_time()
            accuracy = evaluate_now()
            self.eval_seconds += time.perf_counter() - started
            self.eval_cpu += time.process_time() - cpu_started
            completions = trainer.generated_completions
            point = dict(completions=completions, steps=steps, wall_s=wall, cpu_s=cpu, **meter.counts(), **accuracy)
            self.curve.append(point)

        def on_step_end(self, args, state, control, **kwargs):
            completions = trainer.generated_completions
            wall, cpu = self.training_seconds()
            self.per_step.append([completions, meter.calls, meter.decode_steps, round(cpu, 4), round(wall, 4)])
            if completions >= budget or completions >= self.next_eval:
                self.point(state.global_step)
                while self.next_eval <= completions:  # a large dynamic-sampling step can pass several
                    self.next_eval += eval_every

    return Budget()


def train_arm(output: str, arm: int, seed: int, plan: dict, jobs: int) -> dict:
    """One run: the seed's warm-started policy, the arm's config, until the budget; returns its record."""
    plan_ = Plan(**plan)
    name = f"arm{arm}-seed{seed}"
    folder = Path(output) / "runs" / name
    _worker_setup(folder / "log.txt", plan_.threads)
    import torch
    from ablation_tasks import evaluate_by_class, task_splits
    from safetensors.torch import load_model
    from transformers.trainer_callback import PrinterCallback

    from reward_funcs import math_reward
    from trl_dapo_ext.cli.demo import build_tokenizer_and_model, preserved_rng, rl_config, rl_trainer
    from trl_dapo_ext.metric_names import N

    wall_started = time.perf_counter()
    warm = json.loads((warm_dir(Path(output), seed) / "warm.json").read_text())
    per_step = plan_.completions_per_step
    plain_steps = math.ceil(plan_.budget / per_step)  # arm 1's steps: the lr schedule's length
    settings = DemoSettings(**{**plan_.demo, "output_dir": str(folder.parent), "seed": seed, "rl_steps": plain_steps})
    splits = task_splits(plan_.task, settings, plan_.held_out_per_class)
    tokens = settings.completion_tokens
    held_out, rl_rows = splits.held_out, splits.rl_rows
    tokenizer, model = build_tokenizer_and_model(settings.model_size, seed)
    load_model(model, str(warm_dir(Path(output), seed) / "model.safetensors"))
    torch.manual_seed(seed)  # as the demo does before its RL stage
    args = rl_config(
        settings,
        name,
        ARMS[arm].config,
        save_strategy="no",
        logging_steps=1,  # every step's dynamic_sampling/generated_completions, to check the budget's count
        disable_tqdm=True,
        # Stop at the first step that has generated the budget, the lr schedule (the demo's: constant, then a cosine
        # decay to 0) on completions generated / (prompts x G): every arm anneals over the same budget.
        max_generated_completions=plan_.budget,
        # Refill reaches the budget in fewer steps; screening and the fixed budget can spend less than a plain step
        # (a prompt dropped after its probes costs k completions), so they may take more: this cap never stops a run.
        max_steps=plain_steps * 4,
    )

    def evaluate_now() -> dict:
        with preserved_rng():  # the training run's random stream stays as if it were never evaluated
            result = evaluate_by_class(model, tokenizer, held_out, settings.eval_samples, seed, math_reward, tokens)
        return dict(accuracy=result["overall"], accuracy_by_class=result["by_class"])

    meter = GenerationMeter(math_reward)
    trainer, counter = rl_trainer(model, tokenizer, rl_rows, args, meter)
    budget = _budget_callback(plan_.budget, plan_.eval_every, trainer, evaluate_now, meter)
    trainer.add_callback(budget)
    trainer.remove_callback(PrinterCallback)  # a line per step would bury the log
    trainer.train()
    if counter.completions != trainer.generated_completions:  # the verifier scored every completion once
        raise RuntimeError(f"{counter.completions} completions scored, {trainer.generated_completions} counted")
    if not budget.curve or budget.curve[-1]["steps"] != trainer.state.global_step:
        budget.point(trainer.state.global_step)  # stopped by max_steps before the budget: cannot happen, but say so
    trainer.save_state()  # trainer_state.json: `trl-dapo report DIR/runs/NAME` draws the run's dashboard

    logs = [h for h in trainer.state.log_history if "loss" in h]

    def mean(key: str) -> float | None:
        values = [h[key] for h in logs if h.get(key) is not None and not math.isnan(h[key])]
        return sum(values) / len(values) if values else None

    def total(key: str) -> float | None:
        values = [h[key] for h in logs if key in h]
        return sum(values) if values else None

    before = warm_start_point(warm)
    training_wall, training_cpu = budget.curve[-1]["wall_s"], budget.curve[-1]["cpu_s"]
    return dict(
        arm=arm,
        arm_name=ARMS[arm].name,
        seed=seed,
        budget=plan_.budget,
        completions=trainer.generated_completions,
        completions_before_last_step=budget.completions_before_last_step,
        completions_logged=total(N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS),  # the trainer's own count (sampling arms)
        optimizer_steps=trainer.state.global_step,
        # What the budget bought in the other units: tokens, generation calls (the trainer's logged rounds, 1 per
        # step without dynamic sampling, must agree with the meter's) and the modelled GPU decode steps.
        generated_tokens=meter.tokens,
        generation_calls=meter.calls,
        generation_calls_logged=total(N.DYNAMIC_SAMPLING_ROUNDS) or len(logs),
        decode_steps=meter.decode_steps,
        per_step=dict(columns=list(PER_STEP_COLUMNS), values=budget.per_step),
        wall_s=training_wall,
        cpu_s=training_cpu,
        eval_s=budget.eval_seconds,
        run_wall_s=time.perf_counter() - wall_started,
        threads=torch.get_num_threads(),
        jobs=jobs,
        machine=machine(),
        accuracy_before=warm["accuracy_before"],
        accuracy_after=budget.curve[-1]["accuracy"],
        curve=[before, *budget.curve],
        config={key: value for key, value in ARMS[arm].config.items()},
        truncated_frac=mean(N.LENGTH_TRUNCATED_FRAC),
        rounds_per_step=mean(N.DYNAMIC_SAMPLING_ROUNDS),
        retention_rate=mean(N.DYNAMIC_SAMPLING_RETENTION_RATE),
        filled_groups=total(N.DYNAMIC_SAMPLING_FILLED_GROUPS),
        skipped_prompts=total(N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS),
        frac_mixed_attempted=mean(N.GROUPS_FRAC_MIXED),
        zero_variance_curve=zero_variance_curve(logs, N.GROUPS_FRAC_MIXED),
        task=plan_.task,
        final_learning_rate=logs[-1].get("learning_rate") if logs else None,
        sft_steps=warm["sft_steps"],
    )


def check_task_seed(output: str, seed: int, plan: dict, prompts_per_class: int) -> dict:
    """The task at ``seed``'s warm start (`benchmarks/protocol.md`, task acceptance): GRPO's groups of G on the first
    ``prompts_per_class`` RL prompts of each class (`ablation_tasks.warm_start_groups`) and the held-out accuracy per
    class (``warm.json``'s); written to ``DIR/task_check.json``, one entry per seed."""
    plan_ = Plan(**plan)
    folder = warm_dir(Path(output), seed)
    _worker_setup(folder / "check_log.txt", plan_.threads)
    from ablation_tasks import task_splits, warm_start_groups
    from safetensors.torch import load_model

    from reward_funcs import math_reward
    from trl_dapo_ext.cli.demo import build_tokenizer_and_model

    warm = json.loads((folder / "warm.json").read_text())
    settings = DemoSettings(**{**plan_.demo, "output_dir": str(folder), "seed": seed})
    splits = task_splits(plan_.task, settings, plan_.held_out_per_class)
    # the first RL prompts of each class, easiest first: as many per class as the RL prompts hold (1,000 each)
    sample = [
        row for kind in splits.classes for row in [r for r in splits.rl_rows if r["class"] == kind][:prompts_per_class]
    ]
    tokenizer, model = build_tokenizer_and_model(settings.model_size, seed)
    load_model(model, str(folder / "model.safetensors"))
    started = time.process_time()
    groups = warm_start_groups(
        model, tokenizer, sample, settings.num_generations, seed, math_reward, settings.completion_tokens
    )
    return dict(
        seed=seed,
        task=plan_.task,
        sft_steps=warm["sft_steps"],
        held_out=warm["accuracy_before"],
        held_out_by_class=warm["accuracy_before_by_class"],
        grpo_groups=groups,
        cpu_s=time.process_time() - started,
        machine=machine(),
    )


def warm_start_point(warm: dict) -> dict:
    """The first point of every run's curve: the seed's warm start, before any RL (``warm.json``'s evaluation)."""
    return dict(
        completions=0,
        steps=0,
        wall_s=0.0,
        cpu_s=0.0,
        generated_tokens=0,
        generation_calls=0,
        decode_steps=0,
        accuracy=warm["accuracy_before"],
        accuracy_by_class=warm["accuracy_before_by_class"],
    )


def zero_variance_curve(logs: list[dict], frac_mixed: str, points: int = 10) -> list[list[float]]:
    """``[last step, zero-variance share]`` of the attempted groups over ``points`` equal spans of the run's steps.

    >>> zero_variance_curve([{"groups/frac_mixed": v} for v in (0.2, 0.4, 0.6, 0.8)], "groups/frac_mixed", points=2)
    [[2, 0.7], [4, 0.3]]
    """
    values = [(index + 1, 1.0 - h[frac_mixed]) for index, h in enumerate(logs) if h.get(frac_mixed) is not None]
    curve = []
    for span in range(points):
        chunk = values[len(values) * span // points : len(values) * (span + 1) // points]
        if chunk:
            curve.append([chunk[-1][0], round(statistics.fmean(v for _, v in chunk), 6)])
    return curve


# ---------------------------------------------------------------------------------------------------------------------
# Orchestration: warm starts first, each seed's runs as soon as its warm start exists; results saved after each run
# ---------------------------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the wall times depend on: CPU, cores, kernel path and library versions."""
    import torch
    import transformers
    import trl

    cpu = next(
        (line.split(":", 1)[1].strip() for line in _read_lines("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    return dict(
        cpu=cpu,
        cores=os.cpu_count(),
        kernel_path=os.environ.get("ATEN_CPU_CAPABILITY") or f"native ({torch.backends.cpu.get_cpu_capability()})",
        platform=platform.platform(),
        python=platform.python_version(),
        torch=torch.__version__,
        trl=trl.__version__,
        transformers=transformers.__version__,
    )


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _write_json(path: Path, data: Any) -> None:
    """Atomic write: an interrupted run never leaves a half-written results file behind."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def load_results(output: Path, plan: Plan) -> dict:
    """``DIR/results.json`` (or a fresh one); refuses to mix runs made under other shared settings."""
    path = output / RESULTS
    if not path.exists():
        return dict(plan=asdict(plan), machine=machine(), runs=[])
    results = json.loads(path.read_text())
    saved, wanted = results["plan"], asdict(plan)
    # A field files made before it existed lack reads as None, its default: those runs still resume.
    differ = sorted(key for key in set(saved) | set(wanted) if key != "demo" and saved.get(key) != wanted.get(key))
    made, now = demo_as_made(saved.get("demo") or {}), demo_as_made(wanted["demo"])
    differ += [f"demo's {key}" for key in sorted(set(made) | set(now)) if made.get(key) != now.get(key)]
    if differ:
        raise SystemExit(
            f"{path} holds runs made with other settings ({', '.join(differ)} differ): its runs cannot be compared "
            "with new ones. Use another --output, or the same --budget / --eval-every / --smoke as before."
        )
    return results


def warm_start_mismatch(results: dict, seed: int, warm: dict) -> str | None:
    """Why a warm start made again for ``seed`` cannot serve the runs ``results`` already holds for it, or None.

    A study resumed on a fresh machine remakes the warm starts it did not keep; its earlier runs of the seed started
    from the first one, so pairing by seed needs the two to be the same policy. Their held-out evaluations (the
    same problems and random numbers) must then be equal.

    >>> runs = [{"seed": 0, "arm": 3, "accuracy_before": {"sampled": 0.5}}]
    >>> warm_start_mismatch({"runs": runs}, 0, {"accuracy_before": {"sampled": 0.5}}) is None
    True
    >>> warm_start_mismatch({"runs": runs}, 0, {"accuracy_before": {"sampled": 0.51}})[:40]
    'the warm start of seed 0 was made again '
    """
    earlier = [run for run in results["runs"] if run["seed"] == seed]
    if not earlier or all(run["accuracy_before"] == warm["accuracy_before"] for run in earlier):
        return None
    return (
        f"the warm start of seed {seed} was made again and differs from the one its runs (arms "
        f"{sorted(run['arm'] for run in earlier)}) started from: held-out sampled "
        f"{warm['accuracy_before']['sampled']:.4f} against {earlier[0]['accuracy_before']['sampled']:.4f}. Run this "
        "seed's remaining arms where its warm start is kept (DIR/warm), on the same kernel path, or in a new folder."
    )


def run_all(output: Path, plan: Plan, arms: Sequence[int], seeds: Sequence[int], jobs: int) -> tuple[dict, int]:
    """Runs every (arm, seed) not yet in ``DIR/results.json``, ``jobs`` at a time; returns the results and failures."""
    output.mkdir(parents=True, exist_ok=True)
    results = load_results(output, plan)
    _write_json(output / RESULTS, results)  # pins the shared settings from the first run on
    done = {(r["arm"], r["seed"]) for r in results["runs"]}
    todo = {seed: [arm for arm in arms if (arm, seed) not in done] for seed in seeds}
    todo = {seed: runs for seed, runs in todo.items() if runs}
    skipped = sum(1 for arm in arms for seed in seeds if (arm, seed) in done)
    count = sum(len(runs) for runs in todo.values())
    print(f"{count} runs to do, {skipped} already in {output / RESULTS}; {jobs} at a time, {plan.threads} thread each")
    failures = 0
    if not todo:
        return results, failures
    plan_dict = asdict(plan)
    warm = {seed: _saved_warm_start(output, seed, plan) for seed in todo}  # before any work starts: it may refuse
    # A fresh process per task: no run inherits another's state (thread pools, caches, allocator).
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), max_tasks_per_child=1)
    pending: dict[Future, tuple[str, int, int | None]] = {}

    def submit_runs(seed: int) -> None:
        for arm in todo[seed]:
            pending[pool.submit(train_arm, str(output), arm, seed, plan_dict, jobs)] = ("run", seed, arm)

    try:
        for seed in todo:
            if warm[seed]:
                submit_runs(seed)
            else:
                pending[pool.submit(warm_start_seed, str(output), seed, plan_dict)] = ("warm", seed, None)
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                kind, seed, arm = pending.pop(future)
                try:
                    value = future.result()
                except Exception:
                    failures += 1
                    what = f"warm start of seed {seed}" if kind == "warm" else f"arm {arm}, seed {seed}"
                    log = warm_dir(output, seed) if kind == "warm" else output / "runs" / f"arm{arm}-seed{seed}"
                    print(f"FAILED: {what} (log: {log / 'log.txt'})\n{traceback.format_exc(limit=3)}", flush=True)
                    continue
                if kind == "warm":
                    acc = value["accuracy_before"]
                    print(
                        f"warm start seed {seed}: {value['sft_steps']} steps, {value['sft_seconds']:.0f} s; held-out "
                        f"greedy {acc['greedy']:.1%}, sampled {acc['sampled']:.1%}",
                        flush=True,
                    )
                    if mismatch := warm_start_mismatch(results, seed, value):
                        failures += 1
                        print(f"FAILED: {mismatch}", flush=True)
                        continue
                    submit_runs(seed)
                    continue
                results["runs"].append(value)
                results["runs"].sort(key=lambda r: (r["seed"], r["arm"]))
                _write_json(output / RESULTS, results)
                print(_run_line(value), flush=True)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        print(f"\ninterrupted: {len(results['runs'])} runs are saved in {output / RESULTS}; rerun to resume")
        raise
    pool.shutdown()
    return results, failures


TASK_CHECK = "task_check.json"


def check_task(output: Path, plan: Plan, seeds: Sequence[int], prompts_per_class: int) -> dict:
    """`check_task_seed` of each seed, its warm start made first where ``DIR/warm`` lacks it (a study in ``DIR``
    reuses it); ``DIR/task_check.json`` keeps one check per seed. Trains no arm."""
    output.mkdir(parents=True, exist_ok=True)
    plan_dict, checks = asdict(plan), {}
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        for seed in seeds:
            if not _saved_warm_start(output, seed, plan):
                pool.submit(warm_start_seed, str(output), seed, plan_dict).result()
            checks[str(seed)] = pool.submit(check_task_seed, str(output), seed, plan_dict, prompts_per_class).result()
    path = output / TASK_CHECK
    saved = json.loads(path.read_text()) if path.exists() else {"plan": plan_dict, "seeds": {}}
    if saved["plan"] != plan_dict:
        raise SystemExit(f"{path} holds checks of other settings; use another --output")
    saved["seeds"].update(checks)
    _write_json(path, saved)
    return saved


def task_check_table(check: dict) -> str:
    """One seed's `check_task_seed` as a markdown table: per class and overall."""
    groups, held_out = check["grpo_groups"], check["held_out_by_class"]
    lines = [
        f"Seed {check['seed']}, warm start of {check['sft_steps']} steps; GRPO's groups of {groups['group_size']} on "
        f"{groups['overall']['groups']} RL prompts; held-out accuracy on the task's held-out split.",
        "",
        "| class | held-out greedy | held-out sampled | RL pass rate | all-right groups | all-wrong groups "
        "| zero-variance groups | completion tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(kind, held_out[kind], groups["by_class"][kind]) for kind in groups["by_class"]]
    rows.append(("overall", check["held_out"], groups["overall"]))
    for kind, acc, g in rows:
        lines.append(
            f"| {kind} | {acc['greedy']:.1%} | {acc['sampled']:.1%} | {g['pass_rate']:.1%} | {g['all_right']:.0%} "
            f"| {g['all_wrong']:.0%} | {g['zero_variance']:.0%} | {g['tokens']:.1f} |"
        )
    return "\n".join(lines)


def demo_as_made(demo: dict) -> dict:
    """``demo`` (a plan's or a warm start's settings) with each `DemoSettings` field its file predates at that
    field's default: a field is added with the default that keeps what ran before as it ran."""
    defaults = {k: v for k, v in asdict(DemoSettings()).items() if k not in ("output_dir", "seed", "compare")}
    return {**defaults, **demo}


# Settings only the RL stage reads: a warm start made under other values of them is the same warm start (the warm
# start's supervised batches and checks do not read the group shape either).
RL_ONLY_SETTINGS = ("learning_rate", "warmup_steps", "decay_steps", "prompts_per_step", "num_generations")


def _saved_warm_start(output: Path, seed: int, plan: Plan) -> bool:
    """Whether ``DIR/warm/seedN`` holds a finished warm start of these settings, the RL stage's aside (a warm start
    of other settings is refused)."""
    path = warm_dir(output, seed) / "warm.json"
    if not path.exists():
        return False

    def warm_start_settings(demo: dict) -> dict:
        return {k: v for k, v in demo_as_made(demo).items() if k not in RL_ONLY_SETTINGS}

    if warm_start_settings(json.loads(path.read_text()).get("demo") or {}) != warm_start_settings(plan.demo):
        raise SystemExit(f"{path.parent} holds a warm start made with other demo settings; use another --output")
    return True


def _run_line(r: dict) -> str:
    return (
        f"arm {r['arm']} ({r['arm_name']}), seed {r['seed']}: {r['completions']:,} completions in "
        f"{r['optimizer_steps']} steps, {r['wall_s']:.0f} s training; held-out sampled "
        f"{r['accuracy_before']['sampled']:.1%} -> {r['accuracy_after']['sampled']:.1%}"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Summary: table and plot
# ---------------------------------------------------------------------------------------------------------------------


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz; no scipy here)."""
    if x <= 0.0 or x >= 1.0:
        return min(max(x, 0.0), 1.0)
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast below the mean; use the symmetry above it
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    value = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * value


def t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom.

    >>> round(t_two_sided_p(2.776, 4), 4)
    0.05
    """
    return _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of Student's t (``0.5 < probability < 1``), by bisection on `t_two_sided_p`.

    >>> round(t_quantile(0.975, 4), 3)
    2.776
    """
    if not 0.5 < probability < 1.0:
        raise ValueError(f"t_quantile takes a probability in (0.5, 1), got {probability}")
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > 2.0 * (1.0 - probability):
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_two_sided_p(middle, df) > 2.0 * (1.0 - probability) else (low, middle)
    return (low + high) / 2.0


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """Mean and ``level`` t-interval of ``values`` (None for fewer than two).

    >>> [round(v, 3) for v in t_interval([1.0, 2.0, 3.0])]
    [2.0, -0.484, 4.484]
    """
    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(1.0 - (1.0 - level) / 2.0, len(values) - 1) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def holm(p_values: dict[Any, float]) -> dict[Any, float]:
    """Holm's step-down adjusted p-values: a comparison is significant at level a when its adjusted p is <= a, with
    the chance of any false positive among all of them at most a.

    >>> holm({"a": 0.01, "b": 0.04, "c": 0.03})
    {'a': 0.03, 'c': 0.06, 'b': 0.06}
    """
    ordered = sorted(p_values, key=p_values.__getitem__)
    adjusted, running = {}, 0.0
    for rank, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p_values[key]))
        adjusted[key] = round(running, 12)
    return adjusted


def paired(runs: Sequence[dict], arm: int, reference: int, value: Callable[[dict], float]) -> dict[int, float]:
    """``value(run)`` of ``arm`` minus that of ``reference``, per seed both ran (in seed order)."""
    by = {(run["arm"], run["seed"]): value(run) for run in runs}
    return {
        seed: by[arm, seed] - by[reference, seed] for a, seed in sorted(by) if a == arm and (reference, seed) in by
    }


def paired_differences(runs: list[dict], arm: int, reference: int) -> list[float]:
    """``arm``'s held-out sampled accuracy after the budget minus ``reference``'s, per seed both ran."""
    return list(paired(runs, arm, reference, lambda run: run["accuracy_after"]["sampled"]).values())


def corrected_comparisons(runs: list[dict], level: float = 0.95) -> list[dict]:
    """The selection arms (`SELECTION_ARMS`) against arm 1 after the budget, as one family of comparisons: per arm
    the paired t-test's p, Holm's adjusted p over the family, and the Bonferroni interval (each at level 1 - (1 -
    ``level``) / m for m arms), so that a single arm's interval above 0 is not read as a finding by itself."""
    family = sorted({r["arm"] for r in runs} & set(SELECTION_ARMS) - {1})
    diffs = {arm: paired_differences(runs, arm, 1) for arm in family}
    family = [arm for arm in family if len(diffs[arm]) >= 2]
    p_values = {}
    for arm in family:
        mean, sd, n = statistics.fmean(diffs[arm]), statistics.stdev(diffs[arm]), len(diffs[arm])
        p_values[arm] = t_two_sided_p(mean / (sd / math.sqrt(n)), n - 1) if sd > 0 else float(mean == 0)
    adjusted = holm(p_values)
    corrected = 1.0 - (1.0 - level) / max(len(family), 1)
    return [
        {
            "arm": arm,
            "difference": statistics.fmean(diffs[arm]),
            "p": p_values[arm],
            "holm_p": adjusted[arm],
            "bonferroni": t_interval(diffs[arm], corrected),
        }
        for arm in family
    ]


def sampled_at(curve: list[dict], axis: str, x: float) -> float:
    """Held-out sampled accuracy at ``x`` on ``axis`` (completions, steps or wall_s), linear between evaluations."""
    xs, ys = [p[axis] for p in curve], [p["accuracy"]["sampled"] for p in curve]
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def _points(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values) * 100:.1f}"


def _diff_cell(diffs: list[float]) -> str:
    if not diffs:
        return ""
    interval = t_interval(diffs)
    if interval is None:
        return f"{diffs[0] * 100:+.1f} (n=1)"
    mean, low, high = (v * 100 for v in interval)
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}] (n={len(diffs)})"


def summary_table(results: dict) -> str:
    """The markdown report: after the budget (overall and per class), at equal wall and CPU time, what the runs did."""
    runs, plan = results["runs"], results["plan"]
    arms = sorted({r["arm"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["arm"], r["seed"]): r for r in runs}
    machines = sorted({(m["cpu"], m["cores"], m["kernel_path"]) for m in (r["machine"] for r in runs)})
    m = results["machine"]
    jobs = sorted({r["jobs"] for r in runs})
    lines = [
        f"Budget {plan['budget']:,} generated completions per run, evaluated every {plan['eval_every']:,}; seeds "
        f"{', '.join(map(str, seeds))}; task {plan.get('task', 'demo')}, {_held_out_size(plan)} held-out problems x "
        f"{plan['demo']['eval_samples']} "
        f"samples at temperature 1 (the same random numbers for every arm and evaluation).",
        f"Machine: {'; '.join(f'{cpu}, {cores} cores, kernel path {path}' for cpu, cores, path in machines)}; "
        f"{plan['threads']} torch thread per "
        f"run, {'/'.join(map(str, jobs))} run(s) at a time; torch {m['torch']}, TRL {m['trl']}, transformers "
        f"{m['transformers']}.",
        "Accuracies are held-out sampled accuracy in %; differences are to arm 1 (GRPO) and to arm 3 (GRPO with "
        "DAPO's loss, the base of the selection arms) in points, paired by seed, with a 95% t-interval over seeds.",
        "",
        "**After the budget**",
        "",
        "| arm | runs | optimizer steps | completions | training s | before | after: mean | sd | min - max "
        "| after - arm 1 | after - arm 3 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for arm in arms:
        mine = [by[arm, s] for s in seeds if (arm, s) in by]
        after = [r["accuracy_after"]["sampled"] for r in mine]
        diffs, diffs_3 = (
            [
                by[arm, s]["accuracy_after"]["sampled"] - by[reference, s]["accuracy_after"]["sampled"]
                for s in seeds
                if arm != reference and (reference, s) in by and (arm, s) in by
            ]
            for reference in (1, 3)
        )
        sd = f"{statistics.stdev(after) * 100:.1f}" if len(after) > 1 else ""
        lines.append(
            f"| {arm} {mine[0]['arm_name']} | {len(mine)} | {statistics.fmean(r['optimizer_steps'] for r in mine):.0f} "
            f"| {statistics.fmean(r['completions'] for r in mine):,.0f} | {statistics.fmean(r['wall_s'] for r in mine):.0f} "
            f"| {_points([r['accuracy_before']['sampled'] for r in mine])} | {_points(after)} | {sd} "
            f"| {min(after) * 100:.1f} - {max(after) * 100:.1f} | {_diff_cell(diffs)} | {_diff_cell(diffs_3)} |"
        )
    lines += _corrected_table(runs)
    lines += _class_tables(runs, arms, seeds, by)
    # Wall time is what a user waits for; on a shared machine, other processes' load slows runs unequally, and the
    # process's own CPU time is the steadier measure of the same cost.
    # No table at equal optimizer steps: every arm's lr schedule runs on completions generated, so at a given step a
    # refill arm (more completions per step) is further into its decay than GRPO, and the comparison would mix the
    # schedule into it. Arms at GRPO's budget (7, 9) take GRPO's steps anyway.
    for axis, title, unit in (
        ("wall_s", "At equal wall time", "training s"),
        ("cpu_s", "At equal CPU time", "CPU s"),
    ):
        # Per seed, the point every run of the seed reached: the fewest steps (or seconds) of any of its runs.
        reference = {
            s: min(by[a, s]["curve"][-1][axis] for a in arms if (a, s) in by)
            for s in seeds
            if any((a, s) in by for a in arms)
        }
        lines += [
            "",
            f"**{title}** (per seed, the {unit} of its shortest run; accuracy interpolated between evaluations)",
            "",
            f"| arm | {unit} compared (mean) | accuracy: mean | min - max | - arm 1 |",
            "|---|---:|---:|---:|---|",
        ]
        for arm in arms:
            mine = {s: sampled_at(by[arm, s]["curve"], axis, reference[s]) for s in seeds if (arm, s) in by}
            arm1 = {s: sampled_at(by[1, s]["curve"], axis, reference[s]) for s in seeds if (1, s) in by}
            diffs = [mine[s] - arm1[s] for s in mine if s in arm1] if arm != 1 else []
            values = list(mine.values())
            lines.append(
                f"| {arm} | {statistics.fmean(reference[s] for s in mine):,.0f} | {_points(values)} "
                f"| {min(values) * 100:.1f} - {max(values) * 100:.1f} | {_diff_cell(diffs)} |"
            )
    lines += [
        "",
        "**What the runs did** (means over runs and steps)",
        "",
        "| arm | completions per informative group | rounds per step | retention | mixed groups (attempted) "
        "| filled groups | skipped prompts | truncated completions | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in arms:
        mine = [by[arm, s] for s in seeds if (arm, s) in by]

        def avg(key: str, fmt: str, mine: list[dict] = mine) -> str:
            values = [r[key] for r in mine if r.get(key) is not None]
            return format(statistics.fmean(values), fmt) if values else "-"

        per_group = [r["completions"] / r["informative_groups"] for r in mine if r.get("informative_groups")]
        per_group_cell = f"{statistics.fmean(per_group):.1f}" if per_group else "-"
        lines.append(
            f"| {arm} | {per_group_cell} | {avg('rounds_per_step', '.2f')} | {avg('retention_rate', '.2f')} "
            f"| {avg('frac_mixed_attempted', '.2f')} | {avg('filled_groups', '.0f')} | {avg('skipped_prompts', '.0f')} "
            f"| {avg('truncated_frac', '.2%')} | {avg('cpu_s', '.0f')} |"
        )
    note = (
        NOT_RUN_NOTE
        if plan.get("task") != "scratchpad"
        else NOT_RUN_NOTE.replace(
            "fits in the 6 allowed tokens (`#### `, up to four digits, `<eos>`)",
            "is at most 23 of the 24 allowed tokens",
        )
    )
    lines += ["", note, ""]
    return "\n".join(lines)


def _corrected_table(runs: list[dict]) -> list[str]:
    """`corrected_comparisons` as a table, when more than one selection arm was compared with arm 1."""
    rows = corrected_comparisons(runs)
    if len(rows) < 2:
        return []
    lines = [
        "",
        f"**Corrected for {len(rows)} comparisons** (the selection arms against arm 1 after the budget, as one family: "
        f"the paired t-test's p, Holm's adjusted p, and the Bonferroni interval: each arm's at level 1 - 0.05 / {len(rows)})",
        "",
        "| arm | after - arm 1 | p | Holm p | Bonferroni interval |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        _, low, high = (v * 100 for v in row["bonferroni"])
        lines.append(
            f"| {row['arm']} | {row['difference'] * 100:+.1f} | {row['p']:.3f} | {row['holm_p']:.2f} "
            f"| [{low:+.1f}, {high:+.1f}] |"
        )
    return lines


def _held_out_size(plan: dict) -> int:
    from ablation_tasks import task_splits

    settings = DemoSettings(**{**plan["demo"], "output_dir": ""})
    return len(task_splits(plan.get("task", "demo"), settings, plan.get("held_out_per_class")).held_out)


def _class_after(run: dict, kind: str) -> float:
    return run["curve"][-1]["accuracy_by_class"][kind]["sampled"]


def _class_tables(runs: list[dict], arms: list[int], seeds: list[int], by: dict) -> list[str]:
    """Per difficulty class (the mixed task): accuracy after the budget and its difference to arms 1 and 3, paired
    by seed; then the zero-variance share of the groups GRPO (arm 1) generated, over its run."""
    classes = list(runs[0]["curve"][-1].get("accuracy_by_class", {}))  # the task's classes, easiest first
    classes = [c for c in classes if all(c in r["curve"][-1].get("accuracy_by_class", {}) for r in runs)]
    if len(classes) < 2:  # the demo task's one class is the overall accuracy
        return []
    lines = [
        "",
        "**After the budget, per class** (held-out sampled accuracy in %; differences in points, paired by seed, "
        "95% t-interval)",
        "",
        "| arm | " + " | ".join(f"{c}: before | {c}: after | {c}: - arm 1 | {c}: - arm 3" for c in classes) + " |",
        "|---|" + "---:|---:|---|---|" * len(classes),
    ]
    for arm in arms:
        cells = []
        for kind in classes:
            mine = {s: _class_after(by[arm, s], kind) for s in seeds if (arm, s) in by}
            before = [by[arm, s]["curve"][0]["accuracy_by_class"][kind]["sampled"] for s in mine]
            cells += [_points(before), _points(list(mine.values()))]
            for reference in (1, 3):
                diffs = [
                    mine[s] - _class_after(by[reference, s], kind)
                    for s in mine
                    if (reference, s) in by and arm != reference
                ]
                cells.append(_diff_cell(diffs))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    grpo = [by[1, s] for s in seeds if (1, s) in by and by[1, s].get("zero_variance_curve")]
    if grpo:
        curves = [r["zero_variance_curve"] for r in grpo]
        length = min(len(c) for c in curves)
        lines += [
            "",
            "**Zero-variance share of GRPO's groups** (arm 1, mean over seeds; each column a tenth of the run)",
            "",
            "| up to step | " + " | ".join(str(curves[0][i][0]) for i in range(length)) + " |",
            "|---|" + "---:|" * length,
            "| zero-variance groups | "
            + " | ".join(f"{statistics.fmean(c[i][1] for c in curves):.0%}" for i in range(length))
            + " |",
        ]
    return lines


def plot(results: dict, path: Path) -> None:
    """Held-out sampled accuracy against completions generated, optimizer steps and training seconds: per arm the
    mean over seeds and a band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=True)
    axis_labels = (("completions", "completions generated"), ("steps", "optimizer steps"), ("wall_s", "training s"))
    for ax, (axis, label) in zip(axes, axis_labels):
        for index, arm in enumerate(sorted({r["arm"] for r in runs})):
            mine = [r for r in runs if r["arm"] == arm]
            end = min(r["curve"][-1][axis] for r in mine)  # where every seed of the arm has a value
            grid = [end * i / 40 for i in range(41)]
            ys = [[sampled_at(r["curve"], axis, x) * 100 for x in grid] for r in mine]
            mean = [statistics.fmean(column) for column in zip(*ys)]
            color = f"C{index}"
            ax.plot(grid, mean, color=color, label=f"{arm} {mine[0]['arm_name']}")
            if len(mine) > 1:
                ax.fill_between(grid, [min(c) for c in zip(*ys)], [max(c) for c in zip(*ys)], color=color, alpha=0.15)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].axvline(results["plan"]["budget"], color="grey", linestyle="--", linewidth=1, label="budget")
    axes[0].set_ylabel("held-out sampled accuracy (%)")
    axes[0].legend(fontsize=8, loc="lower right")
    seeds = len({r["seed"] for r in runs})
    fig.suptitle(
        f"Equal-compute ablation on the {results['plan'].get('task', 'demo')} task: mean of {seeds} seed(s), band from "
        "lowest to highest seed",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------------
# Command
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Options:
    output: Path
    arms: list[int] = field(default_factory=lambda: sorted(ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    budget: int | None = None
    eval_every: int | None = None
    jobs: int = 1
    smoke: bool = False
    task: str = "demo"
    check_task: int | None = None
    learning_rate: float | None = None
    num_generations: int | None = None


def parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arms = ", ".join(f"{a.number} {a.name}" for a in ARMS.values())
    parser.add_argument("--output", type=Path, required=True, help="results.json, results.md, ablation.png, runs")
    parser.add_argument(
        "--arms",
        nargs="+",
        default=None,
        help=f"arm numbers, 'selection' for {' '.join(map(str, SELECTION_ARMS))} or 'protocol' for "
        f"{' '.join(map(str, PROTOCOL_ARMS))} (benchmarks/protocol.md) (default all); each seed's runs go in this "
        f"order: {arms}",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="demo",
        help="demo: the demo's additions; mixed: easy / medium / hard classes, most groups all right or all wrong; "
        "scratchpad: 2- to 5-digit additions with a scratchpad, longer completions for harder problems "
        "(benchmarks/ablation_tasks.py)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 3 4")
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help=f"generated completions per run (default {default_budget(DemoSettings()):,}: the demo's RL steps x "
        "prompts x G, what arm 1 generates in the demo)",
    )
    parser.add_argument(
        "--eval-every", type=int, default=None, help="completions between held-out evaluations (default budget / 10)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process on 1 thread")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a pipeline check of a few minutes: arms {SMOKE['arms']}, seed {SMOKE['seeds']}, budget "
        f"{SMOKE['budget']:,}, evaluations every {SMOKE['eval_every']}, a fixed 150-step warm start, 2 samples per "
        "held-out problem (explicit flags win)",
    )
    parser.add_argument(
        "--check-task",
        type=int,
        nargs="?",
        const=250,
        default=None,
        metavar="PROMPTS",
        help="train no arm: the task at each seed's warm start (benchmarks/protocol.md, task acceptance): GRPO's "
        "groups on PROMPTS RL prompts per class (default 250), held-out accuracy per class; DIR/task_check.json",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help=f"the RL stage's lr for every arm (default the demo's, {DemoSettings().learning_rate:g}; "
        "benchmarks/protocol.md's pilot picks it). A warm start made for another lr serves: copy DIR/warm",
    )
    parser.add_argument(
        "--num-generations",
        type=int,
        default=None,
        metavar="G",
        help="completions per prompt (default the demo's, 8), with prompts per step = the demo's completions per step "
        "/ G, so a step generates as many completions as before (benchmarks/protocol.md's G = 16 pair: 8 prompts x "
        "16). A warm start made for another G serves: copy DIR/warm",
    )
    ns = parser.parse_args(argv)
    if ns.learning_rate is not None and not ns.learning_rate > 0:
        parser.error("--learning-rate must be > 0")
    per_step = DemoSettings().prompts_per_step * DemoSettings().num_generations
    if ns.num_generations is not None and (ns.num_generations < 2 or per_step % ns.num_generations):
        parser.error(
            f"--num-generations must be >= 2 and divide the {per_step} completions a step generates (e.g. 4, 8, 16)"
        )
    options = Options(
        output=ns.output,
        jobs=ns.jobs,
        smoke=ns.smoke,
        task=ns.task,
        check_task=ns.check_task,
        learning_rate=ns.learning_rate,
        num_generations=ns.num_generations,
    )
    if ns.arms is not None:
        try:
            # The order given is the order each seed's runs are made in (protocol amendment 4 runs arm 10 first).
            ns.arms = list(dict.fromkeys(a for word in ns.arms for a in ARM_GROUPS.get(word, None) or [int(word)]))
        except ValueError:
            parser.error(f"--arms takes arm numbers ({', '.join(map(str, sorted(ARMS)))}), 'selection' or 'protocol'")
        if set(ns.arms) - set(ARMS):
            parser.error(
                f"no arm {sorted(set(ns.arms) - set(ARMS))}; the arms are {', '.join(map(str, sorted(ARMS)))}"
            )
    if ns.smoke:
        options.arms, options.seeds = list(SMOKE["arms"]), list(SMOKE["seeds"])
        options.budget, options.eval_every = SMOKE["budget"], SMOKE["eval_every"]
    for key in ("arms", "seeds", "budget", "eval_every"):
        if getattr(ns, key) is not None:
            setattr(options, key, getattr(ns, key))
    if options.jobs < 1:
        parser.error("--jobs must be >= 1")
    if (options.budget is not None and options.budget < 1) or (
        options.eval_every is not None and options.eval_every < 1
    ):
        parser.error("--budget and --eval-every must be >= 1")
    return options


def informative_groups(run_dir: Path, groups_per_step: int) -> int | None:
    """Informative groups a run generated (mixed rewards: the only groups with a gradient), from its logged steps.

    With dynamic sampling, the groups it found informative (retained or surplus); without, the mixed share of each
    step's groups (diagnostics' ``groups/frac_mixed``, the same rule for a right/wrong reward). None without a log.
    """
    path = run_dir / "trainer_state.json"
    if not path.exists():
        return None
    steps = [h for h in json.loads(path.read_text())["log_history"] if "loss" in h]
    if steps and "dynamic_sampling/retained_groups" in steps[0]:
        found = ("dynamic_sampling/retained_groups", "dynamic_sampling/discarded_surplus_groups")
        return round(sum(h[key] for h in steps for key in found))
    return round(
        sum(h["groups/frac_mixed"] * groups_per_step for h in steps if h.get("groups/frac_mixed") is not None)
    )


def attach_informative_groups(results: dict, folder: Path) -> None:
    """Adds ``informative_groups`` to each run of ``results`` whose log is in ``folder/runs``."""
    groups = results["plan"].get("demo", {}).get("prompts_per_step")
    for run in results["runs"] if groups else []:
        found = informative_groups(folder / "runs" / f"arm{run['arm']}-seed{run['seed']}", groups)
        if found is not None:
            run["informative_groups"] = found


def merge(output: Path, sources: Sequence[Path]) -> dict:
    """One results file from ablations of the same plan run apart (e.g. one kernel path each): their runs together.

    Refuses sources of another plan, and a run (arm, seed) found twice.
    """
    merged: dict | None = None
    for source in sources:
        results = json.loads((source / RESULTS).read_text())
        attach_informative_groups(results, source)
        if merged is None:
            merged = {**results, "runs": list(results["runs"]), "merged_from": [str(source)]}
            continue
        if results["plan"] != merged["plan"]:
            raise SystemExit(f"{source / RESULTS} was made with another plan than {sources[0] / RESULTS}")
        seen = {(r["arm"], r["seed"]) for r in merged["runs"]}
        twice = sorted((r["arm"], r["seed"]) for r in results["runs"] if (r["arm"], r["seed"]) in seen)
        if twice:
            raise SystemExit(f"{source / RESULTS} repeats runs (arm, seed) {twice}")
        merged["runs"] += results["runs"]
        merged["merged_from"].append(str(source))
    if merged is None:
        raise SystemExit("--merge needs at least one results folder")
    merged["runs"].sort(key=lambda r: (r["seed"], r["arm"]))
    output.mkdir(parents=True, exist_ok=True)
    _write_json(output / RESULTS, merged)
    return merged


def make_plan(options: Options) -> Plan:
    """What every run of these options shares: the task's demo settings, the budget, the evaluation grid."""
    settings = demo_settings(options.smoke, options.task)
    if options.learning_rate is not None:
        settings.learning_rate = options.learning_rate
    if options.num_generations is not None:  # the same completions per step, in fewer, larger groups
        per_step = settings.prompts_per_step * settings.num_generations
        settings.num_generations, settings.prompts_per_step = (
            options.num_generations,
            per_step // options.num_generations,
        )
    budget = options.budget or default_budget(settings)
    # 4,000 held-out problems of up to 23 tokens would make the smoke run's evaluations its largest cost
    smoke_held_out = SMOKE["scratchpad_held_out_per_class"]
    return Plan(
        demo={k: v for k, v in asdict(settings).items() if k not in ("output_dir", "seed", "compare")},
        budget=budget,
        eval_every=options.eval_every or max(budget // 10, 1),
        smoke=options.smoke,
        task=options.task,
        held_out_per_class=smoke_held_out if options.smoke and options.task == "scratchpad" else None,
    )


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--merge" in argv:  # --merge OUTPUT SOURCE...: tables and plot of the merged runs, nothing trained
        output, *sources = (Path(a) for a in argv[argv.index("--merge") + 1 :])
        results = merge(output, sources)
        (output / TABLE).write_text(summary_table(results))
        plot(results, output / PLOT)
        print(summary_table(results))
        return 0
    options = parse(argv)
    plan = make_plan(options)
    if options.check_task is not None:
        saved = check_task(options.output, plan, options.seeds, options.check_task)
        for seed in options.seeds:
            print(task_check_table(saved["seeds"][str(seed)]), end="\n\n")
        return 0
    started = time.perf_counter()
    try:
        results, failures = run_all(options.output, plan, options.arms, options.seeds, options.jobs)
    except KeyboardInterrupt:
        return 130
    if results["runs"]:
        attach_informative_groups(results, options.output)
        table = summary_table(results)
        (options.output / TABLE).write_text(table)
        plot(results, options.output / PLOT)
        print()
        print(table)
        print(
            f"table: {options.output / TABLE}    plot: {options.output / PLOT}    results: {options.output / RESULTS}"
        )
    print(f"wall time: {time.perf_counter() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
