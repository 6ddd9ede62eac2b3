"""One `trl-dapo train` run: everything checked before the model loads, then train, save, summarise, report."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from trl import ModelConfig

from trl_dapo_ext.cli.errors import pop_debug, report_error
from trl_dapo_ext.cli.interrupts import (
    INTERRUPTED_DIR,
    RunInterrupted,
    report_interrupt,
    resume_command,
    save_on_interrupt,
)
from trl_dapo_ext.config import DAPOConfig
from trl_dapo_ext.cpu_threads import parse_threads, set_cpu_threads
from trl_dapo_ext.launch import LaunchError

from .arguments import TrainError, TrainScriptArguments, parse_args
from .data import check_local_path, load_train_dataset
from .model import check_context_length, check_generation_backend, load_tokenizer, model_loading_kwargs
from .rewards import check_reward_columns, resolve_reward_funcs


def train(script_args: TrainScriptArguments, training_args: DAPOConfig, model_args: ModelConfig) -> dict[str, Any]:
    """Build the trainer from parsed arguments, train, save, and return the run summary (also `train_summary.json`).

    Everything that can be checked before the model loads is: reward names and their dataset columns, the vLLM
    backend, the completion budget against the model's context. Ctrl-C during training saves a checkpoint
    (`trl_dapo_ext.cli.interrupts`) and raises `RunInterrupted`.
    """
    import torch

    threads = set_cpu_threads(parse_threads(str(script_args.threads)))  # while idle: auto measures the others' load
    if threads is not None:
        print(f"threads: {threads.describe()}")
    trainer = _build_trainer(script_args, training_args, model_args)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    with save_on_interrupt(trainer, os.path.join(training_args.output_dir, INTERRUPTED_DIR)):
        result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    wall = time.perf_counter() - started

    try:
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json in output_dir, which `trl-dapo report` reads
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted after training, while saving into {training_args.output_dir}: the files there may be "
            "incomplete",
            training_args.output_dir,
        ) from None
    summary = _summary(trainer, result, wall, model_args)
    if threads is not None:
        summary["threads"] = threads.as_dict()
    if trainer.accelerator.is_main_process:
        _write_outputs(Path(training_args.output_dir), summary, script_args.report)
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()
    return summary


def _build_trainer(script_args: TrainScriptArguments, training_args: DAPOConfig, model_args: ModelConfig):
    """The checks that need no model weights, in order, then the tokenizer, the data and the `DAPOTrainer`."""
    from trl_dapo_ext import DAPOTrainer

    if not model_args.model_name_or_path:
        raise TrainError("model_name_or_path is required (a hub id or a local folder written by save_pretrained)")
    reward_funcs = resolve_reward_funcs(script_args.reward_funcs)
    check_local_path(model_args.model_name_or_path, "model_name_or_path")
    check_generation_backend(training_args)
    model_kwargs = model_loading_kwargs(model_args, training_args)
    check_context_length(model_args, training_args)
    tokenizer = load_tokenizer(model_args, training_args, script_args)
    dataset = load_train_dataset(script_args)
    check_reward_columns(reward_funcs, dataset.column_names)
    return DAPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **model_kwargs,
    )


def _write_outputs(output: Path, summary: dict[str, Any], report: bool) -> None:
    """``train_summary.json`` (also printed) and, with ``report``, the dashboard."""
    (output / "train_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    if report:
        try:
            _draw_report(output)
        except KeyboardInterrupt:
            raise RunInterrupted(
                f"interrupted while drawing the report: the model and trainer state are saved in {output}",
                str(output),
            ) from None


def _summary(trainer, result, wall: float, model_args: ModelConfig) -> dict[str, Any]:
    import torch

    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    steps = trainer.state.global_step
    summary: dict[str, Any] = dict(
        model=model_args.model_name_or_path,
        steps=steps,
        wall_s=round(wall, 2),
        steps_per_s=round(steps / wall, 4) if wall > 0 else None,
        train_loss=getattr(result, "training_loss", None),
        reward_first=rewards[0] if rewards else None,
        reward_last=rewards[-1] if rewards else None,
        device="cpu",
    )
    if torch.cuda.is_available() and not trainer.args.use_cpu:
        # Peak tensor memory of this process on its GPU (the trainer's; vLLM colocate's KV cache is allocated by
        # vLLM through the same allocator only in part, so `nvidia-smi` can show more).
        summary.update(
            device=torch.cuda.get_device_name(),
            peak_memory_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
        )
    return summary


def _draw_report(output: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        print("report skipped: matplotlib is not installed (a dependency of trl-dapo-ext: pip install matplotlib)")
        return
    from trl_dapo_ext.cli.report import ReportError, build_report

    try:
        report = build_report(output)
    except ReportError as error:
        print(f"report skipped: {error}")
        return
    print(f"report: {report.image}")


def main(argv: list[str] | None = None, prog: str = "trl-dapo train") -> int:
    """Run `trl-dapo train` with ``argv``; 0 on success, 2 on a recipe or input problem (one line on stderr), 1 when
    a reward function raised (one line), 130 on Ctrl-C (after saving a checkpoint). ``--debug`` adds the traceback."""
    import yaml

    from trl_dapo_ext import RewardFunctionError

    argv, debug = pop_debug(sys.argv[1:] if argv is None else list(argv))
    try:
        script_args, training_args, model_args = parse_args(argv, prog)
    except (ValueError, OSError, yaml.YAMLError) as error:
        # Config validation (DAPOConfig, TrainingArguments, an unknown YAML key), a missing or unparsable recipe.
        return report_error(prog, error, debug)
    try:
        train(script_args, training_args, model_args)
    except (TrainError, LaunchError) as error:
        return report_error(prog, error, debug)
    except RewardFunctionError as error:
        return report_error(prog, error, debug, status=1)
    except (RunInterrupted, KeyboardInterrupt) as error:
        # A bare KeyboardInterrupt comes from before training: loading the model, the tokenizer or the data.
        status = report_interrupt(error, prog, nothing_saved="training had not started, nothing was saved")
        if isinstance(error, RunInterrupted) and error.resumable:
            command = resume_command(prog, argv, "--resume_from_checkpoint", error.folder)
            print(f"resume with: {command}", file=sys.stderr, flush=True)
        return status
    return 0
