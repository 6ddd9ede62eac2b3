"""The demo's warm start: a short supervised fine-tune (TRL's ``SFTTrainer``) on an imperfect teacher's answers, which
teaches the answer format and leaves RL room to go past the teacher; saved and recorded for ``--resume``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from trl_dapo_ext.cli.interrupts import INTERRUPTED_DIR, save_on_interrupt

from .evaluation import greedy_accuracy, preserved_rng
from .progress import WARM_START_DIR, DemoProgress
from .settings import DemoSettings, common_args


def warm_start(
    model,
    tokenizer,
    train_rows,
    settings: DemoSettings,
    resume_from: str | None = None,
    check_rows: list[dict] | None = None,
    on_check: Callable[[int, float], None] | None = None,
) -> int:
    """Supervised warm start until greedy accuracy on warm-start problems reaches the target; returns its steps.

    A fixed step count gave warm starts from 26% to 61% greedy across seeds and CPUs (float kernels differ, and this
    stage is where accuracy climbs fastest), and RL from the weak ones gained little. Stopping at a target accuracy
    (checked every ``sft_check_every`` steps, never on the held-out split) hands RL the same starting point
    everywhere. The check reads the first ``sft_check_problems`` of ``check_rows`` (default: of ``train_rows``),
    generating up to ``completion_tokens``; ``on_check(step, accuracy)`` sees each check. ``warm_start_target=None``
    runs exactly ``sft_steps`` steps. ``resume_from``: a full checkpoint of this stage to continue from.
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from reward_funcs import math_reward

    args = SFTConfig(
        **common_args(os.path.join(settings.output_dir, "sft"), settings.seed),
        max_steps=settings.sft_steps,
        per_device_train_batch_size=128,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        save_strategy="no",
        packing=False,
    )
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in train_rows])
    probe = (train_rows if check_rows is None else check_rows)[: settings.sft_check_problems]
    target = settings.warm_start_target

    class StopAtTarget(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if target is None or state.global_step % settings.sft_check_every:
                return
            with preserved_rng():  # the check must not change the training run's random stream
                accuracy = greedy_accuracy(model, tokenizer, probe, math_reward, settings.completion_tokens)
            if on_check is not None:
                on_check(state.global_step, accuracy)
            if accuracy >= target:
                control.should_training_stop = True

    trainer = SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[StopAtTarget()]
    )
    with save_on_interrupt(trainer, os.path.join(args.output_dir, INTERRUPTED_DIR)):
        trainer.train(resume_from_checkpoint=resume_from)
    return trainer.state.global_step


def warm_start_stage(model, tokenizer, sft_rows, settings: DemoSettings, progress: DemoProgress) -> int:
    """The warm start, saved in ``output_dir/sft/final`` and recorded; on resume its model loaded instead when done."""
    from safetensors.torch import load_model

    folder = Path(settings.output_dir) / WARM_START_DIR
    if progress.sft_steps is not None:
        load_model(model, str(folder / "model.safetensors"))
        print(f"warm start: {progress.sft_steps} steps, finished before: loaded {folder}")
        return progress.sft_steps
    sft_steps = warm_start(model, tokenizer, sft_rows, settings, resume_from=progress.checkpoint_of("sft"))
    model.save_pretrained(folder)
    progress.sft_steps, progress.checkpoint = sft_steps, None
    progress.save(settings.output_dir)
    print(f"warm start: {sft_steps} steps")
    return sft_steps
