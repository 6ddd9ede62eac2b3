"""A tiny real run logged to TensorBoard and trackio, read back from their files, for ``docs/trackers.md``.

``log`` trains the tiny test model (``tests/helpers.py``'s ``tiny_trainer``) with dynamic sampling and diagnostics for
a few steps with ``report_to=["tensorboard", "trackio"]``: TensorBoard's event files go to ``DIR/tensorboard``
(``TENSORBOARD_LOGGING_DIR``) and trackio's local store (its SQLite database, no account, no network) to
``DIR/trackio`` (``TRACKIO_DIR``, which trackio reads when it is first imported: so the run is a fresh process). Then each store is read back with its own
reader (TensorBoard's ``EventAccumulator``; trackio's ``SQLiteStorage``) and the scalar names found are written to
``DIR/readback.json``. ``tests/test_trackers.py`` checks them against `trl_dapo_ext.metric_names`.

    python docs/scripts/trackers.py                # 40 steps, then draws docs/trackers_tensorboard.png
    python docs/scripts/trackers.py log DIR STEPS  # only the run and the read-back (what the test runs)

The figure is drawn with matplotlib from the values read back out of the TensorBoard event files (no browser here to
take a screenshot of TensorBoard itself); each panel is one scalar tag as the event files hold it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "trl-dapo-ext-trackers"
RUN_NAME = "tiny-dapo"
FIGURE = ROOT / "docs" / "trackers_tensorboard.png"
# The panels of the figure: TensorBoard tags (the Trainer prefixes every training metric with train/).
PANELS = (
    "train/reward",
    "train/groups/frac_mixed",
    "train/dynamic_sampling/retention_rate",
    "train/dynamic_sampling/generated_completions",
    "train/cost/generated_tokens_per_retained_group",
    "train/time/generation_frac",
)


def tensorboard_scalars(logdir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag in the TensorBoard event files under ``logdir``: ``[(step, value), ...]`` per tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[tuple[int, float]]] = {}
    for folder, _, files in os.walk(logdir):
        if not any(name.startswith("events.out.tfevents") for name in files):
            continue
        events = EventAccumulator(folder, size_guidance={"scalars": 0})  # 0: keep every point
        events.Reload()
        for tag in events.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
    return scalars


def trackio_logs(project: str) -> list[dict]:
    """Every logged row of ``project`` in trackio's local store (``TRACKIO_DIR`` of this process)."""
    from trackio.sqlite_storage import SQLiteStorage

    return [row for run in SQLiteStorage.get_runs(project) for row in SQLiteStorage.get_logs(project, run)]


def log(output_dir: str, steps: int) -> dict:
    """Train ``steps`` steps logging to both trackers under ``output_dir``; the names read back (also written to
    ``output_dir/readback.json``). Run in a fresh process with ``TRACKIO_DIR`` set (see `main`)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from datasets import Dataset
    from helpers import first_char_digit_reward, tiny_trainer

    from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

    torch.set_num_threads(1)
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=0)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(48)]})
    trainer = tiny_trainer(
        model,
        first_char_digit_reward,
        dataset,
        tokenizer,
        output_dir,
        max_steps=steps,
        learning_rate=2e-2,
        report_to=["tensorboard", "trackio"],
        project=PROJECT,
        run_name=RUN_NAME,
        trackio_static_space_id=False,  # local only: nothing is pushed to a Space
        dynamic_sampling=True,
        dynamic_sampling_on_exhausted="fill",
        diagnostics=True,
    )
    trainer.train()
    readback = {
        "tensorboard": sorted(tensorboard_scalars(os.path.join(output_dir, "tensorboard"))),
        "trackio": sorted({key for row in trackio_logs(PROJECT) for key in row}),
        "steps": trainer.state.global_step,
    }
    Path(output_dir, "readback.json").write_text(json.dumps(readback, indent=1))
    return readback


def run_logged(output_dir: str | os.PathLike, steps: int) -> subprocess.CompletedProcess:
    """`log` in a fresh process, trackio's store in ``output_dir/trackio``, offline."""
    env = {
        **os.environ,
        "TRACKIO_DIR": str(Path(output_dir, "trackio")),
        "TENSORBOARD_LOGGING_DIR": str(Path(output_dir, "tensorboard")),  # transformers 5: no logging_dir field
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, __file__, "log", str(output_dir), str(steps)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)


def draw(scalars: dict[str, list[tuple[int, float]]], path: Path) -> None:
    """The `PANELS` of a run as TensorBoard's scalar cards would show them: one panel per tag, value over step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(12, 6.2))
    for ax, tag in zip(axes.flat, PANELS):
        points = scalars.get(tag, [])
        ax.plot([s for s, _ in points], [v for _, v in points], color="#ff7043", marker=".", linewidth=1.2)
        ax.set_title(tag, fontsize=9, loc="left")
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(
        "A tiny run's scalars read back from its TensorBoard event files (EventAccumulator), drawn with matplotlib",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    if argv[:1] == ["log"]:
        log(argv[1], int(argv[2]))
        return
    with tempfile.TemporaryDirectory() as folder:
        result = run_logged(folder, steps=40)
        if result.returncode != 0:
            raise SystemExit(result.stdout[-2000:] + result.stderr[-4000:])
        draw(tensorboard_scalars(Path(folder, "tensorboard")), FIGURE)
    print(f"wrote {FIGURE}")


if __name__ == "__main__":
    main(sys.argv[1:])
