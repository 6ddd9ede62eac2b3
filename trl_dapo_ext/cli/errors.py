"""One-line errors of the commands: the message on stderr and the exit status, the traceback only with ``--debug``.

Bad input is one line and status 2 (docs/preflight.md); a command that fails in the user's code (a reward that
raises during training) is one line and status 1. ``--debug`` prints the chained traceback first, for a bug report.

Example:
    >>> report_error("trl-dapo profile", ValueError("--model ./m does not exist"), debug=False)  # doctest: +SKIP
    trl-dapo profile: error: --model ./m does not exist
    2
"""

from __future__ import annotations

import sys


def pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without a bare ``--debug`` flag, and whether it was there. ``--debug VALUE`` stays: it is
    `TrainingArguments.debug`.

    >>> pop_debug(["--config", "r.yaml", "--debug"]), pop_debug(["--debug", "underflow_overflow"])
    ((['--config', 'r.yaml'], True), (['--debug', 'underflow_overflow'], False))
    """
    for position, item in enumerate(argv):
        following = argv[position + 1] if position + 1 < len(argv) else None
        if item == "--debug" and (following is None or following.startswith("--")):
            return argv[:position] + argv[position + 1 :], True
    return argv, False


def report_error(prog: str, error: BaseException, debug: bool, status: int = 2) -> int:
    """Print ``error`` as one line on stderr (with ``debug``, after its traceback) and return ``status``."""
    import traceback

    if debug:
        traceback.print_exception(error)
    hint = "" if debug else " (--debug shows the traceback)" if status != 2 else ""
    message = " ".join(str(error).split())  # one line, also for a YAML error's multi-line report
    print(f"{prog}: error: {message}{hint}", file=sys.stderr, flush=True)
    return status
