"""One demo run: the stages in order (data, model, warm start, evaluation, RL, results), each skipped on ``--resume``
when an interrupted run there finished it."""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

from trl_dapo_ext.cpu_threads import ThreadChoice, openmp_settings, resolve_threads

from .data import split_problems
from .evaluation import evaluate
from .model import build_tokenizer_and_model
from .progress import PROGRESS_FILE, DemoProgress, start_progress
from .results import print_table, save_results
from .rl import rl_stage
from .settings import AUTO_THREADS_AT_MOST, DemoSettings
from .sft import warm_start_stage


def run_demo(settings: DemoSettings, resume: bool = False) -> dict:
    """The demo in ``settings.output_dir``; with ``resume``, continued from what an interrupted run there saved."""
    settings, threads = _set_up_process(settings)

    from reward_funcs import math_reward

    output = Path(settings.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    wall_start = time.perf_counter()

    held_out, sft_rows, rl_rows = split_problems(settings)
    teacher = sum(r["completion"] == "#### " + r["answer"] for r in sft_rows) / len(sft_rows)
    print(
        f"data: {len(held_out)} held out, {len(sft_rows)} warm start (teacher {teacher:.0%} right), "
        f"{len(rl_rows)} RL prompts (two-digit addition)"
    )

    progress = start_progress(output, asdict(settings), resume)

    tokenizer, model = build_tokenizer_and_model(settings.model_size, settings.seed)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary of {len(tokenizer)}")
    sft_steps = warm_start_stage(model, tokenizer, sft_rows, settings, progress)
    before = evaluate(
        model, tokenizer, held_out, settings.eval_samples, settings.seed, math_reward, settings.completion_tokens
    )
    results = _rl_stages(model, tokenizer, rl_rows, held_out, settings, progress)

    print_table(before, results, settings)
    summary = dict(
        settings=asdict(settings),
        sft_steps=sft_steps,
        before=asdict(before),
        results=results,
        wall_seconds=time.perf_counter() - wall_start,
        # how the thread count was chosen, and what decides how OpenMP workers wait (trl_dapo_ext/cpu_threads.py)
        threads=threads.as_dict(),
        openmp=openmp_settings(),
    )
    save_results(output, summary)
    return summary


def _set_up_process(settings: DemoSettings) -> tuple[DemoSettings, ThreadChoice]:
    """Torch's thread count (``settings.threads`` resolved, and printed) and quiet logs; the settings that record it."""
    # Measured before torch is imported and the run starts, while this process sleeps: only other processes count.
    threads = resolve_threads(settings.threads, at_most=AUTO_THREADS_AT_MOST)
    settings = replace(settings, threads=threads.threads)  # the results record the count that ran
    print(f"threads: {threads.describe()}")

    import torch

    torch.set_num_threads(settings.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    return settings, threads


def _rl_stages(model, tokenizer, rl_rows, held_out, settings: DemoSettings, progress: DemoProgress) -> dict:
    """Each RL stage's results (DAPO's, and plain GRPO's with ``compare``), every one from the same warm start."""
    import torch

    warm_state = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    variants = [("dapo", True)] + ([("grpo", False)] if settings.compare else [])
    for name, dapo in variants:
        if name in progress.results:  # finished before an interruption: its model, report and results are saved
            results[name] = progress.results[name]
            print(f"RL ({name}): finished before, results from {Path(settings.output_dir) / PROGRESS_FILE}")
            continue
        model.load_state_dict(warm_state)
        torch.manual_seed(settings.seed)
        results[name] = rl_stage(model, tokenizer, rl_rows, held_out, settings, dapo, name, progress)
    return results
