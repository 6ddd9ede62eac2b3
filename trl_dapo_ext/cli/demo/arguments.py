"""``trl-dapo demo``'s flags, and the settings they give: ``--quick``'s, with every explicit flag winning over them."""

from __future__ import annotations

import argparse
import importlib

from trl_dapo_ext.cpu_threads import parse_threads

from .data import check_teacher_noise
from .model import SIZES
from .settings import AUTO_THREADS_AT_MOST, QUICK, DemoSettings


def parse_settings(argv: list[str] | None, prog: str) -> tuple[DemoSettings, argparse.Namespace]:
    """The run's settings from ``argv``, and the parsed flags (``--resume``, ``--quick``); bad input exits 2."""
    parser = make_parser(prog)
    options = parser.parse_args(argv)
    if options.teacher_noise is not None:
        try:
            check_teacher_noise(options.teacher_noise, name="--teacher-noise")
        except ValueError as error:
            parser.error(str(error))

    settings = DemoSettings(output_dir=options.output_dir, seed=options.seed, compare=options.compare)
    if options.quick:
        for key, value in QUICK.items():
            setattr(settings, key, value)
    # Explicit flags win over --quick's settings.
    for flag, field in (
        ("model_size", "model_size"),
        ("steps", "rl_steps"),
        ("threads", "threads"),
        ("teacher_noise", "teacher_noise"),
    ):
        if getattr(options, flag) is not None:
            setattr(settings, field, getattr(options, flag))
    if options.sft_steps is not None:
        settings.sft_steps, settings.warm_start_target = options.sft_steps, None
    if options.learning_rate is not None:
        settings.learning_rate = options.learning_rate
    return settings, options


def make_parser(prog: str) -> argparse.ArgumentParser:
    """The demo's parser: where and how it runs (output, seed, threads, --quick, --resume) around the stages' flags."""
    d, q = DemoSettings, QUICK
    quick = ", ".join(f"{key} {value:g}" for key, value in QUICK.items())
    # The command's description is its package's docstring (imported by now: this module is imported from there).
    description = importlib.import_module(__package__).__doc__
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output-dir",
        default=d.output_dir,
        help=f"where checkpoints, logs and report.png go (default {d.output_dir})",
    )
    parser.add_argument(
        "--seed", type=int, default=d.seed, help=f"seed of data, model and sampling (default {d.seed})"
    )
    _add_stage_flags(parser)
    parser.add_argument(
        "--threads",
        type=parse_threads,
        default=None,
        help=f"torch threads: a number, or auto (the default: the cores other processes leave free, at most "
        f"{AUTO_THREADS_AT_MOST}; {q['threads']} with --quick). The count is printed and recorded in "
        "demo_results.json; results repeat exactly for the same count",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run of a few minutes that checks the pipeline, not learning: {quick} (other flags still win)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted demo in --output-dir (give the flags it started with): finished stages are "
        "skipped, the stage Ctrl-C stopped continues from its checkpoint; the results are the uninterrupted run's",
    )
    return parser


def _add_stage_flags(parser: argparse.ArgumentParser) -> None:
    """What the stages run: RL and warm-start steps, the model's size, --compare, the RL lr, the teacher's noise."""
    d, q = DemoSettings, QUICK
    parser.add_argument(
        "--steps", type=int, default=None, help=f"RL steps (default {d.rl_steps}; {q['rl_steps']} with --quick)"
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=None,
        help="a fixed number of warm-start steps (default: until greedy accuracy on warm-start problems reaches "
        f"{d.warm_start_target * 100:.0f}%%, at most {d.sft_steps} steps)",
    )
    parser.add_argument(
        "--model-size", choices=sorted(SIZES), default=None, help=f"model size (default {d.model_size})"
    )
    parser.add_argument("--compare", action="store_true", help="also train with plain GRPO settings and compare")
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help=f"RL learning rate (default {d.learning_rate:g}; {q['learning_rate']:g} with --quick)",
    )
    parser.add_argument(
        "--teacher-noise",
        type=float,
        default=None,
        help="probability that the warm-start teacher writes a wrong digit, per answer digit "
        f"(default {d.teacher_noise:g}; {q['teacher_noise']:g} with --quick)",
    )
