"""The demo's RL stage: ``DAPOTrainer`` from the warm start, with the demo's DAPO features (dynamic sampling, the
clip-higher epsilon) or plain GRPO settings, the library's ``reward_funcs.math_reward`` as verifier and diagnostics
on; what it cost, and its evaluation on the held-out split."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trl_dapo_ext.cli.interrupts import INTERRUPTED_DIR, RunInterrupted, save_on_interrupt

from .evaluation import evaluate
from .progress import RL_COST_FILE, DemoProgress
from .settings import DemoSettings, common_args

# The demo's DAPO features on top of TRL's defaults (which already use the token-level loss, `loss_type="dapo"`).
DAPO_FEATURES: dict[str, Any] = dict(
    dynamic_sampling=True,
    dynamic_sampling_max_rounds=4,
    dynamic_sampling_on_exhausted="fill",
    epsilon_high=0.28,
)


def rl_config(settings: DemoSettings, name: str, features: dict[str, Any], **overrides: Any) -> Any:
    """The RL stage's `DAPOConfig` in ``settings.output_dir/name``: the demo's recipe, ``features``, then ``overrides``."""
    from trl_dapo_ext import DAPOConfig

    recipe = dict(
        **common_args(os.path.join(settings.output_dir, name), settings.seed),
        max_steps=settings.rl_steps,
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations,
        max_completion_length=settings.completion_tokens,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps,
        **_schedule(settings),
        beta=0.0,
        temperature=1.0,
        save_strategy="steps",
        save_steps=max(settings.rl_steps // 2, 1),
        save_total_limit=1,
        diagnostics=True,
    )
    return DAPOConfig(**{**recipe, **features, **overrides})


def rl_trainer(
    model, tokenizer, train_rows, args, verifier, trainer_class: type | None = None, callbacks: list | None = None
) -> tuple[Any, CountingReward]:
    """A `DAPOTrainer` (or ``trainer_class``) on ``train_rows``, and the `CountingReward` that wraps ``verifier``."""
    from datasets import Dataset

    from trl_dapo_ext import DAPOTrainer

    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in train_rows])
    counted = CountingReward(verifier)  # the verifier sees every generated completion, kept or not
    trainer = (trainer_class or DAPOTrainer)(
        model=model,
        reward_funcs=counted,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    return trainer, counted


def reinforce(
    model,
    tokenizer,
    train_rows,
    settings: DemoSettings,
    dapo: bool,
    verifier,
    name: str,
    resume_from: str | None = None,
):
    """The demo's RL stage, with `DAPO_FEATURES` or plain GRPO settings; returns the trainer and what it cost.

    ``resume_from``: a full checkpoint of this stage; the cost then includes what the interrupted run spent.
    """
    args = rl_config(settings, name, DAPO_FEATURES if dapo else {})
    trainer, counted = rl_trainer(model, tokenizer, train_rows, args, verifier)
    spent = json.loads((Path(resume_from) / RL_COST_FILE).read_text()) if resume_from else {}
    started = time.perf_counter()
    try:
        with save_on_interrupt(trainer, os.path.join(args.output_dir, INTERRUPTED_DIR)):
            trainer.train(resume_from_checkpoint=resume_from)
    except RunInterrupted as error:
        if error.resumable:  # the checkpoint keeps the cost so far, for the resumed run to add to
            so_far = dict(
                rl_seconds=spent.get("rl_seconds", 0.0) + time.perf_counter() - started,
                generated=spent.get("generated", 0) + counted.completions,
            )
            (Path(error.folder) / RL_COST_FILE).write_text(json.dumps(so_far))
        raise
    rl_seconds = spent.get("rl_seconds", 0.0) + time.perf_counter() - started
    trainer.save_state()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return trainer, dict(
        rl_seconds=rl_seconds,
        generated=spent.get("generated", 0) + counted.completions,
        frac_zero_variance_attempted=1 - logged_mean(logs, "groups/frac_mixed"),
        frac_zero_std_trained=logged_mean(logs, "frac_reward_zero_std"),
    )


def logged_mean(logs: list[dict], key: str) -> float:
    """The per-step mean of ``key`` over training logs that each average the steps since the previous log.

    Weighted by those steps: a Ctrl-C logs the steps before it (a shorter window), and the resumed run's mean must be
    the uninterrupted run's. 0 when nothing logged ``key``.

    >>> logged_mean([{"step": 3, "x": 1.0}, {"step": 5, "x": 0.0}, {"step": 10, "x": None}], "x")
    0.6
    """
    total = steps = previous = 0
    for log in logs:
        if log.get(key) is not None:
            total += log[key] * (log["step"] - previous)
            steps += log["step"] - previous
        previous = log["step"]
    return total / steps if steps else 0.0


def _schedule(settings: DemoSettings) -> dict:
    """The RL lr schedule: warm-up, constant, then a cosine decay to 0 over the last ``decay_steps`` steps."""
    decay = min(settings.decay_steps, settings.rl_steps - settings.warmup_steps)
    if decay <= 0:
        return dict(lr_scheduler_type="constant_with_warmup")  # constant after warmup_steps
    return dict(lr_scheduler_type="warmup_stable_decay", lr_scheduler_kwargs={"num_decay_steps": decay})


class CountingReward:
    """Wraps a reward function and counts the completions it scores (one call per generation round)."""

    def __init__(self, reward_func) -> None:
        self.reward_func = reward_func
        self.__name__ = getattr(reward_func, "__name__", "reward")
        self.completions = 0

    def __call__(self, completions, **kwargs) -> list:
        self.completions += len(completions)
        return self.reward_func(completions, **kwargs)


def rl_stage(
    model, tokenizer, rl_rows, held_out, settings: DemoSettings, dapo: bool, name: str, progress: DemoProgress
) -> dict:
    """One RL stage from the warm start (or from its checkpoint), evaluated; DAPO's also saves the model and report."""
    from reward_funcs import math_reward

    output = Path(settings.output_dir)
    stage = f"rl-{name}"
    trainer, cost = reinforce(
        model, tokenizer, rl_rows, settings, dapo, math_reward, stage, resume_from=progress.checkpoint_of(stage)
    )
    after = evaluate(
        model, tokenizer, held_out, settings.eval_samples, settings.seed, math_reward, settings.completion_tokens
    )
    result = dict(after=asdict(after), **cost)
    if dapo:
        trainer.save_model(str(output / "final"))
        from trl_dapo_ext.cli.report import build_report

        report = build_report(trainer.args.output_dir, out=output / "report.png")
        result["report"] = str(report.image)
    progress.results[name], progress.checkpoint = result, None
    progress.save(output)
    return result
