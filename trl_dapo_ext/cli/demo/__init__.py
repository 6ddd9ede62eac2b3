"""`trl-dapo demo`: a tiny model learns two-digit addition with DAPO on a CPU, with nothing downloaded.

The whole pipeline, end to end, in a few minutes on 2 cores:

1. data: ``"a+b="`` problems with answers written GSM8K style (``#### 81``); a held-out split is kept apart;
2. model: a ~0.5M-parameter Qwen2-architecture model and a character tokenizer, built locally;
3. warm start: a short supervised fine-tune (TRL's ``SFTTrainer``) on an imperfect teacher's answers (a quarter of
   their digits wrong), which teaches the answer format and leaves RL room to go past the teacher;
4. RL: ``DAPOTrainer`` with dynamic sampling, the library's ``reward_funcs.math_reward`` as verifier, and
   diagnostics on;
5. evaluation before and after RL on the held-out split (greedy, sampled, pass@k), a before/after table, and the
   ``trl-dapo report`` dashboard in the output directory.

``--compare`` trains a second policy from the same warm start with plain GRPO settings and prints both side by side.
"""


# Modules, one job each: `settings` (DemoSettings, --quick), `data` (problems, the teacher, the splits), `model`,
# `evaluation`, `sft` (the warm start), `rl` (the RL stage), `results` (the table, demo_results.json), `progress`
# (what --resume continues), `run` (the stages in order), `arguments` (the flags); this module is the command.

from __future__ import annotations

import sys
from pathlib import Path

from trl_dapo_ext.cli.errors import report_error
from trl_dapo_ext.cli.interrupts import RunInterrupted, report_interrupt, resume_command

from .arguments import make_parser, parse_settings
from .data import check_teacher_noise, imperfect_teacher, make_problems, split_problems
from .evaluation import Evaluation, evaluate, generate, greedy_accuracy, preserved_rng
from .model import SIZES, build_tokenizer_and_model
from .progress import DemoProgress, DemoResumeError, read_progress, record_interrupt
from .results import print_table, save_results
from .rl import DAPO_FEATURES, CountingReward, logged_mean, reinforce, rl_config, rl_stage, rl_trainer
from .run import run_demo
from .settings import AUTO_THREADS_AT_MOST, QUICK, QUICK_NOTE, DemoSettings, common_args
from .sft import warm_start, warm_start_stage

__all__ = [
    "AUTO_THREADS_AT_MOST",
    "DAPO_FEATURES",
    "QUICK",
    "QUICK_NOTE",
    "SIZES",
    "CountingReward",
    "DemoProgress",
    "DemoResumeError",
    "DemoSettings",
    "Evaluation",
    "build_tokenizer_and_model",
    "check_teacher_noise",
    "common_args",
    "evaluate",
    "generate",
    "greedy_accuracy",
    "imperfect_teacher",
    "logged_mean",
    "main",
    "make_parser",
    "make_problems",
    "parse_settings",
    "preserved_rng",
    "print_table",
    "reinforce",
    "rl_config",
    "rl_stage",
    "rl_trainer",
    "run_demo",
    "save_results",
    "split_problems",
    "warm_start",
    "warm_start_stage",
]


def main(argv: list[str] | None = None, prog: str = "trl-dapo demo") -> int:
    """Run ``trl-dapo demo``; 0 when it finished, 2 on bad input (one line), 130 after a Ctrl-C."""
    settings, options = parse_settings(argv, prog)
    try:
        run_demo(settings, resume=options.resume)
    except DemoResumeError as error:
        return report_error(prog, error, debug=False)
    except (RunInterrupted, KeyboardInterrupt) as error:
        return _report_demo_interrupt(error, settings.output_dir, prog, argv)
    if options.quick:
        print(QUICK_NOTE)
    return 0


def _report_demo_interrupt(error: BaseException, output_dir: str, prog: str, argv: list[str] | None) -> int:
    """Say what was saved and, when anything can be reused, the command that resumes the demo; returns 130."""
    resumable = isinstance(error, RunInterrupted) and error.resumable
    # A second Ctrl-C's model-only save cannot be resumed: an earlier checkpoint of the stage, if any, still can.
    progress = record_interrupt(output_dir, error.folder) if resumable else read_progress(output_dir)
    # Between stages (data, evaluation) only what earlier stages wrote exists: say what that is.
    saved = sorted(str(path.parent) for path in Path(output_dir).glob("**/model.safetensors"))
    status = report_interrupt(
        error,
        prog,
        nothing_saved="no training stage was running; "
        + ("saved so far: " + ", ".join(saved) if saved else "nothing was saved yet"),
    )
    if progress is not None and progress.finished_anything():
        print(f"resume with: {resume_command(prog, argv, '--resume')}", file=sys.stderr, flush=True)
    return status
