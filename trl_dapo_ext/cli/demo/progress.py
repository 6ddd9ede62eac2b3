"""`trl-dapo demo --resume`: what an interrupted demo finished, and the checkpoint of the stage it was in.

The demo records its progress in ``OUTPUT_DIR/demo_progress.json``: its settings, the warm start's step count once the
warm start is done (its model is in ``OUTPUT_DIR/sft/final``), each finished RL stage's results, and the full
checkpoint a Ctrl-C saved (``sft/checkpoint-N``, ``rl-dapo/checkpoint-N``, ``rl-grpo/checkpoint-N``; the stage is the
checkpoint's folder). ``--resume`` skips the finished stages, reusing what they saved, continues the interrupted stage
from its checkpoint and runs the rest: the results are those of the uninterrupted demo (``tests/test_demo_resume.py``).

Example:
    >>> progress = DemoProgress(settings={"seed": 0}, checkpoint="runs/demo/rl-dapo/checkpoint-7")
    >>> progress.checkpoint_of("sft"), progress.checkpoint_of("rl-dapo")
    (None, 'runs/demo/rl-dapo/checkpoint-7')
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROGRESS_FILE = "demo_progress.json"
WARM_START_DIR = "sft/final"
# Where an interrupted RL stage's cost so far is kept, in its checkpoint: the resumed stage adds its own.
RL_COST_FILE = "demo_rl_cost.json"
# Settings that may differ on resume: the results repeat exactly for one thread count, and are close for another.
FREE_TO_CHANGE = ("threads",)


class DemoResumeError(ValueError):
    """``--resume`` without an interrupted demo of the same settings in the output folder (one line, exit 2)."""


@dataclass
class DemoProgress:
    settings: dict[str, Any]
    sft_steps: int | None = None  # set once the warm start finished and saved its model
    results: dict[str, dict] = field(default_factory=dict)  # finished RL stages, by name ("dapo", "grpo")
    checkpoint: str | None = None  # the full checkpoint a Ctrl-C saved, in the folder of its stage

    def checkpoint_of(self, stage: str) -> str | None:
        """The checkpoint to continue ``stage`` (``"sft"``, ``"rl-dapo"``, ...) from, if a Ctrl-C saved one in it."""
        if self.checkpoint is None or Path(self.checkpoint).parent.name != stage:
            return None
        return self.checkpoint

    def save(self, output_dir: str | Path) -> None:
        (Path(output_dir) / PROGRESS_FILE).write_text(json.dumps(asdict(self), indent=2))

    def finished_anything(self) -> bool:
        return self.sft_steps is not None or self.checkpoint is not None


def read_progress(output_dir: str | Path) -> DemoProgress | None:
    """The progress recorded in ``output_dir``, or None when there is none (or it is unreadable)."""
    try:
        return DemoProgress(**json.loads((Path(output_dir) / PROGRESS_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def start_progress(output_dir: str | Path, settings: dict[str, Any], resume: bool) -> DemoProgress:
    """A fresh record (saved), or with ``resume`` the recorded one, checked to belong to a demo of ``settings``."""
    if not resume:
        progress = DemoProgress(settings=settings)
        progress.save(output_dir)
        return progress
    progress = read_progress(output_dir)
    if progress is None:
        raise DemoResumeError(f"--resume: {output_dir} holds no interrupted demo ({PROGRESS_FILE} is missing)")
    changed = [
        f"{key} {progress.settings.get(key)!r} there, {value!r} now"
        for key, value in settings.items()
        if key not in FREE_TO_CHANGE and progress.settings.get(key) != value
    ]
    if changed:
        raise DemoResumeError(
            f"--resume: the demo in {output_dir} ran with other settings ({'; '.join(changed)}): resume with the "
            "flags it started with"
        )
    if progress.sft_steps is not None and not (Path(output_dir) / WARM_START_DIR / "config.json").is_file():
        raise DemoResumeError(f"--resume: the warm start's model {Path(output_dir) / WARM_START_DIR} is missing")
    if progress.checkpoint is not None and not Path(progress.checkpoint).is_dir():
        progress.checkpoint = None  # deleted since: that stage starts over
    return progress


def record_interrupt(output_dir: str | Path, checkpoint: str | None) -> DemoProgress | None:
    """Record the full checkpoint a Ctrl-C saved (None: the stage has none); returns the progress, if any."""
    progress = read_progress(output_dir)
    if progress is not None:
        progress.checkpoint = checkpoint
        progress.save(output_dir)
    return progress
