"""The ``trl-dapo`` command: one subcommand per module of this package, imported only when it runs.

``trl-dapo --help`` stays fast because no subcommand module (nor torch, TRL or matplotlib) is imported to list them.
To add a subcommand, add a line to ``COMMANDS`` and a module with ``main(argv: list[str], prog: str) -> int``
that parses its own arguments.

Example:
    >>> main(["report", "/no/such/run"])  # doctest: +SKIP
    trl-dapo report: error: /no/such/run does not exist
    2
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module implementing `main(argv, prog) -> int`, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("trl_dapo_ext.cli.demo", "a tiny model learns addition with DAPO on a CPU, nothing downloaded (minutes)"),
    "report": ("trl_dapo_ext.cli.report", "draw a PNG dashboard and a text summary of a training run's output dir"),
    "train": (
        "trl_dapo_ext.cli.train",
        "train from a YAML recipe, a path or a shipped name (every TRL/DAPO field is a key and a flag)",
    ),
    "recipes": ("trl_dapo_ext.cli.recipes", "list the shipped recipes; copy one out for editing (recipes copy NAME)"),
    # Preflight (docs/preflight.md): test the reward, profile the data's difficulty, estimate a step's cost.
    "check-reward": ("trl_dapo_ext.cli.check_reward", "test a reward function on a battery of good and bad answers"),
    "profile": ("trl_dapo_ext.cli.profile", "pass rate per prompt at group size G: zero-variance share, lengths"),
    "estimate": ("trl_dapo_ext.cli.estimate", "generated tokens per step and GPU memory of a recipe"),
}


def _parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {description}" for name, (_, description) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="trl-dapo",
        description="DAPO extensions for TRL's GRPOTrainer: command-line tools.",
        epilog=f"commands:\n{listing}\n\nRun 'trl-dapo COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the command")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl-dapo-ext")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run ``trl-dapo`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    namespace = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    prog = f"trl-dapo {namespace.command}"
    try:
        module = importlib.import_module(COMMANDS[namespace.command][0])
        return module.main(namespace.args, prog=prog)
    except KeyboardInterrupt:
        # `train` and `demo` save what they can and report it themselves; this is Ctrl-C elsewhere (while torch
        # imports, or in `report`): one line and the shell's status for SIGINT instead of a traceback.
        print(f"\n{prog}: interrupted: nothing was saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
