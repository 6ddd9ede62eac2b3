"""Helpers for the Colab notebooks (`notebooks/*.ipynb`): live progress, completions every N steps, greedy pass@1.

Kept in the package (not in the notebooks) so both notebooks share one tested copy.

Example:
    >>> progress = LiveProgress(plot=False)
    >>> progress.record(1, {"reward": 0.25, "rewards/math_reward/mean": 0.2})
    step    1  reward 0.250  math_reward 0.200
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback

from .metric_names import declared

REWARD = declared("reward")  # TRL's summed reward: a logging step with it is a training step

# logged key (declared in metric_names.py) -> short column label, printed when present
PRINTED_METRICS: dict[str, str] = {
    declared(key): label
    for key, label in (
        ("reward", "reward"),
        ("groups/pass@1", "pass@1"),
        ("dynamic_sampling/retention_rate", "retention"),
        ("dynamic_sampling/rounds", "rounds"),
        ("completions/mean_length", "length"),
        ("step_time", "s/step"),
    )
}


class LiveProgress(TrainerCallback):
    """Prints one line of key metrics per logging step and, in a notebook, redraws a reward curve in place.

    The curve is one display output updated through its display id (no `clear_output`), so TRL's own progress bar
    and earlier output stay visible. Outside IPython (or with ``plot=False``) only the lines are printed.

    >>> from trl_dapo_ext import DAPOTrainer  # doctest: +SKIP
    >>> trainer = DAPOTrainer(..., callbacks=[LiveProgress()])  # doctest: +SKIP
    """

    def __init__(self, plot: bool = True, every: int = 1) -> None:
        self.plot = plot
        self.every = max(1, every)
        self.history: list[tuple[int, dict[str, float]]] = []
        self._handle = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and REWARD in logs and state.is_world_process_zero:
            self.record(state.global_step, logs)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.history and state.is_world_process_zero:
            self._draw()  # the last points, whatever `every` skipped
        return control

    def record(self, step: int, logs: dict[str, Any]) -> None:
        """Keep and print one logging step (also usable without a trainer, as in the example above)."""
        values = {key: float(value) for key, value in logs.items() if isinstance(value, int | float)}
        self.history.append((step, values))
        columns = [f"step {step:4d}"]
        for key, label in PRINTED_METRICS.items():
            if key in values:
                columns.append(f"{label} {values[key]:.3f}")
        for key, value in values.items():  # each task reward's mean, e.g. rewards/math_reward/mean
            if key.startswith("rewards/") and key.endswith("/mean") and "overlong" not in key:
                columns.append(f"{key.split('/')[1]} {value:.3f}")
        print("  ".join(columns), flush=True)
        if len(self.history) % self.every == 0:
            self._draw()

    def _draw(self) -> None:
        if not self.plot:
            return
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return
        if get_ipython() is None:
            return
        import io

        # A bare Figure rendered to PNG bytes: independent of the kernel's matplotlib backend, and nothing left
        # open for the inline backend to show a second time at the end of the cell.
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 3))
        axis = figure.subplots()
        steps = [step for step, _ in self.history]
        keys = [REWARD] + sorted(
            {k for _, v in self.history for k in v if k.startswith("rewards/") and k.endswith("/mean")}
        )
        for key in keys:
            points = [(s, v[key]) for s, v in self.history if key in v]
            if points:
                axis.plot(*zip(*points), marker="o", markersize=3, label=key)
        axis.set_xlabel("step")
        axis.set_xlim(left=0, right=max(steps) + 1)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="best")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=90)
        image = Image(data=buffer.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)


class CompletionsEvery(TrainerCallback):
    """Log TRL's completions table (printed, and ``completions/*.parquet`` for the report) every ``every`` steps.

    TRL's ``log_completions=True`` prints the whole table at every logging step, which buries a notebook's output.
    This callback switches the trainer's flag on for every ``every``-th step (and the last) only; train with
    ``log_completions=False`` and ``logging_steps`` dividing ``every``.

    >>> trainer = DAPOTrainer(..., args=DAPOConfig(..., log_completions=False))  # doctest: +SKIP
    >>> trainer.add_callback(CompletionsEvery(trainer, every=25))  # doctest: +SKIP
    """

    def __init__(self, trainer: Any, every: int = 25) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.trainer = trainer
        self.every = every

    def on_train_begin(self, args, state, control, **kwargs):
        # TRL makes the folder only when log_completions is on at construction.
        if state.is_world_process_zero:
            os.makedirs(os.path.join(args.output_dir, "completions"), exist_ok=True)
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        # Set before the step generates, so dynamic sampling keeps the rows of the batch it assembles.
        step = state.global_step + 1  # the step about to run; its log() reads the flag at the end
        self.trainer.log_completions = step % self.every == 0 or step == state.max_steps
        return control


def greedy_pass_at_1(
    model,
    tokenizer,
    prompts: Sequence[list[dict[str, str]] | str],
    reward_fn: Callable[..., list[float | None]],
    reward_kwargs: dict[str, Sequence[Any]],
    max_new_tokens: int,
    batch_size: int = 32,
    success: float = 1.0,
) -> float:
    """Share of prompts whose greedy completion scores at least ``success`` with ``reward_fn``.

    ``prompts`` are chat messages (rendered with the tokenizer's chat template) or plain strings;
    ``reward_kwargs`` are the reward's dataset columns, one value per prompt (``answer=...`` or ``tests=...``).
    The model (a PEFT model too) generates with transformers, left-padded, in batches.

    >>> from reward_funcs import math_reward  # doctest: +SKIP
    >>> greedy_pass_at_1(model, tokenizer, prompts, math_reward, {"answer": answers}, max_new_tokens=512)  # doctest: +SKIP
    0.41
    """
    import torch

    if not prompts:
        raise ValueError("no prompts to evaluate")
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # generation continues the prompt, so padding goes in front
    passed = 0
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            texts = [
                p
                if isinstance(p, str)
                else tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in chunk
            ]
            # A chat template already contains the special tokens it needs.
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=isinstance(chunk[0], str))
            batch = {key: value.to(model.device) for key, value in batch.items()}
            with torch.no_grad():
                output = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    # Instruct models ship sampling defaults (temperature, top_p, top_k); greedy ignores them.
                    temperature=None,
                    top_p=None,
                    top_k=None,
                    pad_token_id=tokenizer.pad_token_id,
                )
            completions = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            kwargs = {key: list(values[start : start + batch_size]) for key, values in reward_kwargs.items()}
            scores = reward_fn(completions, **kwargs)
            passed += sum(1 for score in scores if score is not None and score >= success)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return passed / len(prompts)
