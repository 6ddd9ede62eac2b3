"""A peer arm for the equal-compute ablation (docs/ablation.md): ``trl-cgrpo`` 0.2.0, its own published package, at its defaults.

C-GRPO (``trl_cgrpo.CGRPOTrainer``, a subclass of TRL's ``GRPOTrainer``) replaces the fixed group size with a
per-prompt budget chosen by split-conformal prediction: each prompt is sampled along ``budget_grid`` and stops at the
first budget whose APS prediction set over the extracted answers is a singleton; the thresholds are fitted on a
held-out calibration set with the current policy, before the first step and every ``recalibrate_every`` steps.
trl-cgrpo needs TRL >= 1.12, < 1.15, and this project needs TRL 1.15/1.16, so the arm runs in its own virtual
environment and never imports ``trl_dapo_ext``'s trainer (only the demo's model, task, verifier and evaluation, which
do not import TRL)::

    python3 -m venv /work/venv-cgrpo
    /work/venv-cgrpo/bin/pip install torch==2.13.0 trl-cgrpo==0.2.0      # resolves trl 1.14.2, transformers 5.24
    ATEN_CPU_CAPABILITY=default PYTHONPATH=. OMP_NUM_THREADS=1 /work/venv-cgrpo/bin/python benchmarks/cgrpo_peer.py \\
        --ablation runs/mixed-default --output runs/mixed-cgrpo-default --seeds 0 3
    PYTHONPATH=. python benchmarks/ablation.py --merge runs/all runs/mixed-default runs/mixed-cgrpo-default ...  # main venv

Run each seed with the kernel path of the ablation that holds its warm start (``ATEN_CPU_CAPABILITY`` as that
ablation had it, unset for ``native``; the script refuses another unless ``--any-kernel-path``), into an output of its
own per kernel path, as the ablation's runs are kept apart for ``--merge``.

``--ablation DIR`` is an ablation (``ablation.py --task mixed``) whose ``DIR/results.json`` holds the plan and whose
``DIR/warm/seedN`` holds the seed's warm start. ``--output OUT`` gets ``OUT/results.json`` with that same plan (so
``--merge`` accepts it) and one record per seed, arm 10, in ``train_arm``'s format; a rerun skips the seeds it holds.

The same as the ablation
------------------------
* model, tokenizer and warm start: the seed's ``DIR/warm/seedN/model.safetensors`` loaded into
  ``build_tokenizer_and_model(plan.demo.model_size, seed)``, then ``torch.manual_seed(seed)`` as `train_arm` does;
* task: ``task_splits(plan.task, DemoSettings(seed=...))``; evaluation: ``evaluate_by_class`` on the same held-out
  split with the same samples and random numbers (inside ``preserved_rng``), every ``plan.eval_every`` generated
  completions and at the end, with ``ablation._budget_callback`` itself (so wall and CPU time exclude evaluation);
* verifier: ``reward_funcs.math_reward``, the only reward;
* the demo's RL recipe (``trl_dapo_ext/cli/demo/rl.py: rl_config``): 16 prompts per step, at most 8 completions per
  prompt (G = 8), lr 3e-4, ``max_completion_length=6``, ``beta=0``, temperature 1, the CPU arguments (`cpu_args`),
  seed and data seed; TRL's other defaults (``loss_type="dapo"``, symmetric clip 0.2, ``scale_rewards="group"``) are
  also trl-cgrpo's;
* the budget and the lr schedule on completions, as ``max_generated_completions`` does for the ablation's arms: the
  run stops at the first optimizer step end with ``plan.budget`` completions generated, and the demo's schedule
  (warmup_stable_decay over ``ceil(budget / 128)`` plain GRPO steps, the last ``decay_steps`` a cosine decay to 0) is
  evaluated at ``generated / 128`` instead of the step count, so the arm anneals over the same budget.

What is counted
---------------
``generated_completions`` counts every completion C-GRPO's generation produces: the completions drawn for training
(``len(prompt_ids)`` of each call to ``CGRPOTrainer._base_generate``, i.e. only the budget increments actually
sampled) **and the calibration rollouts** (``num_calibration_samples x max(budget_grid)`` per calibration, which
the package's README says are "not free" and leaves out of its own ``rollout_savings``). Both cost generation, so
both count against the budget; the record keeps them apart (``training_completions``, ``calibration_completions``).
The reward function is also called on C-GRPO's padding rows (one-token stand-ins for completions never generated,
whose reward the trainer then sets to NaN); those calls are counted apart (``reward_rows``) and not as generated:
counting "every completion the reward function scores" would charge C-GRPO for completions it saved.
``reward_rows - padded_rows == training_completions`` is checked at the end.

What differs, and why
---------------------
1. ``budget_grid=[2, 4, 8]`` instead of the package default ``[2, 4, 8, 16, 32]``: the protocol's group width is
   G = 8, and trl-cgrpo ties ``num_generations`` to ``max(budget_grid)`` (``cgrpo_config.py, __post_init__``). The
   grid is the default cut at G; ``--budget-grid 2 4 8 16 32`` runs the package's full default (groups of up to 32,
   16 x 32 = 512 rows a step).
2. A calibration set, which C-GRPO requires (``cgrpo_trainer.py``: "CGRPOTrainer requires a
   `calibration_dataset`") and the ablation's arms do not have: the first ``--calibration-size`` (200, the size of
   the package README's example, as ``train_test_split(test_size=200)``) of the seed's RL prompts (already shuffled,
   so about the RL prompts' class mix), removed from the training prompts (the README: "calibration examples must
   not be trained on"). The arm trains on 3,200 of the 3,400 RL prompts; the held-out split is untouched. Every
   calibration example is used (``num_calibration_samples=None``, the default): 200 x 8 = 1,600 completions per
   calibration, before step 1 and every 50 steps (``recalibrate_every=50``, the default).
3. ``answer_extractor``, which ``score="aps"`` (the default) requires: ``reward_funcs.extract_final_answer`` (the
   verifier's own extraction of ``#### N``), written as a plain integer when it is one (``"081"`` -> ``"81"``, as
   the verifier would match it); unparseable completions give ``""`` (no mass, as the package intends).
4. Per-step shape: a step is 16 prompts; each draws 2, 4 or 8 completions, so a step generates 32-128 training
   completions, and the run takes more optimizer steps than arm 1's 250 (``per_device_train_batch_size=128`` rows
   with padding; TRL's ``generation_batch_size`` and ``steps_per_generation`` at their defaults, as in the ablation).
5. The stop: the ablation's arms stop through ``DAPOConfig.max_generated_completions`` (this project's trainer);
   here a callback does the same (``control.should_training_stop`` at the first step end at or past the budget), and
   ``max_steps`` is only a cap that cannot bind (budget / (16 x 2) + 1 steps).
6. Library versions: TRL 1.14.2 (trl-cgrpo's pin) instead of the ablation's TRL 1.16; transformers, accelerate,
   datasets and torch are the same versions (5.24.0, 1.16.0, 5.2.0, 2.13.0). Every record carries its own
   ``machine`` (``trl: 1.14.2`` here); the header line of ``--merge``'s table names the first source's TRL only.
7. ``truncated_frac``, ``frac_mixed_attempted`` and ``informative_groups`` are measured by this script's reward
   wrapper over the real (not padded) completions; ``groups/frac_mixed`` is logged per step as the ablation's
   diagnostics log it, so ``ablation.py --merge`` derives ``informative_groups`` the same way. The ablation's
   dynamic-sampling fields (``rounds_per_step``, ``retention_rate``, ...) are None.

Nothing else of trl-cgrpo is changed: ``delta=None`` (set from the calibration solve rate), ``delta_margin=0.05``,
``split_delta=False``, ``score="aps"``, ``recalibrate_every=50``, ``calibration_batch_size`` (128 // 8 = 16 prompts a
call). The subclass below only counts (generation, calibration, reward rows) and evaluates the lr schedule on
completions; it does not touch sampling, stopping, calibration or the loss.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]  # trl_dapo_ext (the demo's pieces only), reward_funcs

ARM = 10
ARM_NAME = "trl-cgrpo 0.2.0 (peer)"
RESULTS = "results.json"


def as_answer(text: str) -> str | None:
    """``reward_funcs.extract_final_answer``, as a plain integer when it is one (the APS answer to compare)."""
    from reward_funcs import extract_final_answer

    answer = extract_final_answer(text)
    if answer is None:
        return None
    answer = answer.strip()
    try:
        return str(int(answer.replace(",", "")))
    except ValueError:
        return answer


def make_trainer_class():
    """``CGRPOTrainer`` plus counting and the lr schedule on completions; nothing of C-GRPO itself changes."""
    import torch
    from trl_cgrpo import CGRPOTrainer

    class CountedCGRPOTrainer(CGRPOTrainer):
        def __init__(self, *args, budget: int, per_step: int, **kwargs):
            self.generated_completions = 0  # training draws + calibration rollouts
            self.calibration_completions = 0
            self._calibrating = False
            self._budget, self._per_step = budget, per_step
            super().__init__(*args, **kwargs)

        def _base_generate(self, prompt_ids, *args, **kwargs):
            out = super()._base_generate(prompt_ids, *args, **kwargs)
            # Training draws and calibration rollouts: the held-out evaluation calls model.generate, never this.
            self.generated_completions += len(prompt_ids)
            if self._calibrating:
                self.calibration_completions += len(prompt_ids)
            return out

        def calibrate(self):
            self._calibrating = True
            try:
                return super().calibrate()
            finally:
                self._calibrating = False

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            # As trl_dapo_ext's max_generated_completions: the schedule of the plain GRPO steps that generate the
            # budget, evaluated at completions generated / (prompts x G).
            steps = math.ceil(self._budget / self._per_step)
            scheduler = super().create_scheduler(steps, optimizer)
            if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                raise TypeError(f"expected a LambdaLR, got {type(scheduler).__name__}")
            if not getattr(scheduler, "_on_completions", False):
                per_step = self._per_step

                def wrapped(schedule):
                    return lambda _step: schedule(self.generated_completions / per_step)

                scheduler.lr_lambdas = [wrapped(s) for s in scheduler.lr_lambdas]
                scheduler._on_completions = True
            return scheduler

    return CountedCGRPOTrainer


class RewardWatch:
    """Wraps the verifier: counts the rows it scores, padded or not, and measures the real completions' groups."""

    def __init__(self, reward_func, group: int, max_length: int) -> None:
        self.reward_func = reward_func
        self.__name__ = getattr(reward_func, "__name__", "reward")
        self.group, self.max_length = group, max_length
        self.trainer = None
        self.rows = self.padded = self.real = self.truncated = 0
        self.groups = self.mixed = 0

    def __call__(self, completions, completion_ids=None, **kwargs) -> list:
        rewards = self.reward_func(completions, completion_ids=completion_ids, **kwargs)
        trainer = self.trainer
        padded = getattr(trainer, "_padded_rows", None) or [False] * len(completions)
        self.rows += len(completions)
        self.padded += sum(padded)
        eos = trainer.processing_class.eos_token_id if trainer is not None else None
        mixed_here = groups_here = 0
        for start in range(0, len(completions), self.group):
            real = [i for i in range(start, min(start + self.group, len(completions))) if not padded[i]]
            self.real += len(real)
            if completion_ids is not None:
                self.truncated += sum(
                    1 for i in real if len(completion_ids[i]) >= self.max_length and completion_ids[i][-1] != eos
                )
            values = {rewards[i] for i in real}
            groups_here += 1
            mixed_here += len(values) > 1
        self.groups += groups_here
        self.mixed += mixed_here
        if trainer is not None and trainer.model.training:
            trainer._metrics["train"]["groups/frac_mixed"].append(mixed_here / max(groups_here, 1))
        return rewards


def _stop_callback(budget: int, trainer):
    from transformers import TrainerCallback

    class StopAtBudget(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if trainer.generated_completions >= budget:
                control.should_training_stop = True

    return StopAtBudget()


def train_cgrpo(ablation_dir: Path, output: Path, seed: int, plan: dict, budget_grid: list[int], calibration: int):
    """One run of the peer arm from the seed's warm start; returns its record in `ablation.train_arm`'s format."""
    import torch
    import trl_cgrpo
    from ablation import Plan, _budget_callback, machine, warm_dir, warm_start_point
    from ablation_tasks import evaluate_by_class, task_splits
    from datasets import Dataset
    from safetensors.torch import load_model
    from transformers.trainer_callback import PrinterCallback
    from trl_cgrpo import CGRPOConfig

    from reward_funcs import math_reward
    from trl_dapo_ext.cli.demo import DemoSettings, build_tokenizer_and_model, preserved_rng
    from trl_dapo_ext.cli.demo.rl import _schedule
    from trl_dapo_ext.tiny import cpu_args

    torch.set_num_threads(plan["threads"])
    plan_ = Plan(**plan)
    name = f"arm{ARM}-seed{seed}"
    folder = output / "runs" / name
    folder.mkdir(parents=True, exist_ok=True)
    wall_started = time.perf_counter()
    warm = json.loads((warm_dir(ablation_dir, seed) / "warm.json").read_text())
    if warm.get("demo") != plan_.demo:
        raise SystemExit(f"{warm_dir(ablation_dir, seed)} holds a warm start of other demo settings")
    per_step = plan_.completions_per_step  # 16 x 8: the schedule's unit, as for the ablation's arms
    plain_steps = math.ceil(plan_.budget / per_step)
    settings = DemoSettings(**{**plan_.demo, "output_dir": str(folder.parent), "seed": seed, "rl_steps": plain_steps})
    splits = task_splits(plan_.task, settings)
    held_out, rl_rows = splits.held_out, splits.rl_rows
    calibration_rows, train_rows = rl_rows[:calibration], rl_rows[calibration:]
    tokenizer, model = build_tokenizer_and_model(settings.model_size, seed)
    load_model(model, str(warm_dir(ablation_dir, seed) / "model.safetensors"))
    torch.manual_seed(seed)  # as train_arm does before RL

    protocol = dict(
        per_device_train_batch_size=settings.prompts_per_step * max(budget_grid),
        budget_grid=budget_grid,
        max_completion_length=6,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps,
        **_schedule(settings),
        beta=0.0,
        temperature=1.0,
    )
    args = CGRPOConfig(
        **cpu_args(str(folder), seed=seed, data_seed=seed, save_only_model=True),
        **protocol,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        max_steps=plan_.budget // (settings.prompts_per_step * min(budget_grid)) + 1,  # a cap that cannot bind
    )
    dataset = lambda rows: Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])  # noqa
    watch = RewardWatch(math_reward, group=max(budget_grid), max_length=6)
    trainer = make_trainer_class()(
        model=model,
        reward_funcs=watch,
        args=args,
        train_dataset=dataset(train_rows),
        processing_class=tokenizer,
        calibration_dataset=dataset(calibration_rows),
        answer_extractor=as_answer,
        budget=plan_.budget,
        per_step=per_step,
    )
    watch.trainer = trainer

    def evaluate_now() -> dict:
        with preserved_rng():
            result = evaluate_by_class(model, tokenizer, held_out, settings.eval_samples, seed, math_reward)
        return dict(accuracy=result["overall"], accuracy_by_class=result["by_class"])

    budget = _budget_callback(plan_.budget, plan_.eval_every, trainer, evaluate_now)
    trainer.add_callback(budget)
    trainer.add_callback(_stop_callback(plan_.budget, trainer))
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    if not budget.curve or budget.curve[-1]["steps"] != trainer.state.global_step:
        budget.point(trainer.state.global_step)
    training = trainer.generated_completions - trainer.calibration_completions
    if watch.rows - watch.padded != training or watch.real != training:
        raise RuntimeError(
            f"{watch.rows} reward rows - {watch.padded} padded != {training} training completions generated"
        )
    trainer.save_state()  # trainer_state.json, with groups/frac_mixed per step (ablation.py --merge reads it)

    logs = [h for h in trainer.state.log_history if "loss" in h]

    def mean(key: str) -> float | None:
        values = [h[key] for h in logs if h.get(key) is not None and not math.isnan(h[key])]
        return sum(values) / len(values) if values else None

    calibrations = [h for h in trainer.state.log_history if h.get("cgrpo/delta") is not None]
    before = warm_start_point(warm)
    return dict(
        arm=ARM,
        arm_name=ARM_NAME,
        seed=seed,
        budget=plan_.budget,
        completions=trainer.generated_completions,
        completions_before_last_step=budget.completions_before_last_step,
        completions_logged=None,
        optimizer_steps=trainer.state.global_step,
        wall_s=budget.curve[-1]["wall_s"],
        cpu_s=budget.curve[-1]["cpu_s"],
        eval_s=budget.eval_seconds,
        run_wall_s=time.perf_counter() - wall_started,
        threads=torch.get_num_threads(),
        jobs=1,
        machine=machine(),
        accuracy_before=warm["accuracy_before"],
        accuracy_after=budget.curve[-1]["accuracy"],
        curve=[before, *budget.curve],
        config={
            **{k: v for k, v in protocol.items()},
            "package": f"trl-cgrpo {trl_cgrpo.__version__}",
            "num_generations": args.num_generations,
            "loss_type": args.loss_type,
            "epsilon": args.epsilon,
            "epsilon_high": args.epsilon_high,
            "scale_rewards": args.scale_rewards,
            "score": args.score,
            "delta": args.delta,
            "delta_margin": args.delta_margin,
            "split_delta": args.split_delta,
            "recalibrate_every": args.recalibrate_every,
            "num_calibration_samples": args.num_calibration_samples,
            "calibration_rows": len(calibration_rows),
            "train_rows": len(train_rows),
        },
        truncated_frac=watch.truncated / max(watch.real, 1),
        rounds_per_step=None,
        retention_rate=None,
        filled_groups=None,
        skipped_prompts=None,
        frac_mixed_attempted=watch.mixed / max(watch.groups, 1),
        informative_groups=watch.mixed,
        zero_variance_curve=_zero_variance_curve(logs),
        task=plan_.task,
        final_learning_rate=logs[-1].get("learning_rate") if logs else None,
        sft_steps=warm["sft_steps"],
        # C-GRPO's own numbers
        training_completions=training,
        calibration_completions=trainer.calibration_completions,
        calibrations=len(calibrations),
        reward_rows=watch.rows,
        padded_rows=watch.padded,
        mean_k=mean("cgrpo/mean_k"),
        rollout_savings=mean("cgrpo/rollout_savings"),
        deltas=[h["cgrpo/delta"] for h in calibrations],
        calibration_solve_rates=[h.get("cgrpo/calibration_solve_rate") for h in calibrations],
    )


def _zero_variance_curve(logs: list[dict]) -> list:
    from ablation import zero_variance_curve

    return zero_variance_curve(logs, "groups/frac_mixed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ablation", type=Path, required=True, help="the ablation: its results.json and warm/seedN")
    parser.add_argument("--output", type=Path, required=True, help="OUT/results.json, OUT/runs/arm10-seedN")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=None, help="override the plan's budget (smoke tests only)")
    parser.add_argument("--eval-every", type=int, default=None, help="override the plan's (smoke tests only)")
    parser.add_argument("--budget-grid", type=int, nargs="+", default=[2, 4, 8], help="default: 2 4 8 (G = 8)")
    parser.add_argument("--calibration-size", type=int, default=200, help="RL prompts held out for calibration")
    parser.add_argument("--any-kernel-path", action="store_true", help="allow another kernel path than the ablation's")
    ns = parser.parse_args(argv)
    if str(ROOT) not in sys.path:  # run as a script, benchmarks/ (ablation.py, ablation_tasks.py) is already there
        sys.path.append(str(ROOT))

    from ablation import _write_json, machine

    ablation = json.loads((ns.ablation / RESULTS).read_text())
    plan = ablation["plan"]
    # The ablation runs each kernel path apart (ATEN_CPU_CAPABILITY); a seed's peer run must use its ablation's.
    here, there = machine()["kernel_path"], ablation["machine"]["kernel_path"]
    if here != there and not ns.any_kernel_path:
        raise SystemExit(
            f"{ns.ablation} was run on kernel path {there!r}, this process has {here!r}: set ATEN_CPU_CAPABILITY as "
            "that ablation did (unset for native), or pass --any-kernel-path"
        )
    if (
        ns.budget is not None or ns.eval_every is not None
    ):  # a smoke test: another plan, never merged with the real one
        plan = {**plan, "budget": ns.budget or plan["budget"], "eval_every": ns.eval_every or plan["eval_every"]}
    path = ns.output / RESULTS
    ns.output.mkdir(parents=True, exist_ok=True)
    results = json.loads(path.read_text()) if path.exists() else dict(plan=plan, machine=machine(), runs=[])
    if results["plan"] != plan:
        raise SystemExit(f"{path} holds runs of another plan; use another --output")
    _write_json(path, results)
    for seed in ns.seeds:
        if any(r["arm"] == ARM and r["seed"] == seed for r in results["runs"]):
            print(f"seed {seed}: already in {path}")
            continue
        record = train_cgrpo(ns.ablation, ns.output, seed, plan, sorted(ns.budget_grid), ns.calibration_size)
        results["runs"].append(record)
        results["runs"].sort(key=lambda r: (r["seed"], r["arm"]))
        _write_json(path, results)
        acc = record["accuracy_after"]
        print(
            f"arm {ARM} seed {seed}: {record['completions']:,} completions ({record['calibration_completions']:,} "
            f"calibration), {record['optimizer_steps']} steps, mean k {record['mean_k']:.2f}, "
            f"{record['wall_s']:.0f} s; held-out greedy {acc['greedy']:.1%}, sampled {acc['sampled']:.1%}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
