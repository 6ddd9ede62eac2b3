"""The package's metrics reach the trackers: a tiny run logged to TensorBoard and trackio (locally, offline), read back.

The run is ``docs/scripts/trackers.py log`` (the one ``docs/trackers.md``'s figure is drawn from), in a fresh process so
that trackio's store lands in ``tmp_path`` (trackio reads ``TRACKIO_DIR`` once, when first imported).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from helpers import ROOT

from trl_dapo_ext.metric_names import expected_names

pytest.importorskip("tensorboard")
pytest.importorskip("trackio")

# Not marked `trainer`: the run is a script in its own process, on the installed TRL only (the TRL 1.15 lane's CPU shim
# lives in this suite's conftest, not in that process); the trackers' integration is transformers', not TRL's.


def _load_trackers_script():
    spec = importlib.util.spec_from_file_location("docs_trackers", ROOT / "docs" / "scripts" / "trackers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_metrics_are_read_back_from_tensorboard_and_trackio(tmp_path):
    trackers = _load_trackers_script()
    result = trackers.run_logged(tmp_path, steps=2)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    readback = json.loads((tmp_path / "readback.json").read_text())
    assert readback["steps"] == 2
    assert (tmp_path / "trackio" / f"{trackers.PROJECT}.db").is_file()  # the local store, not a Space
    # The Trainer's integrations prefix every training metric with train/ (W&B's callback does the same).
    ours = {f"train/{name}" for name in expected_names(diagnostics=True, dynamic_sampling=True)}
    assert {"train/groups/frac_mixed", "train/dynamic_sampling/generated_completions"} <= ours
    for tracker in ("tensorboard", "trackio"):
        missing = ours - set(readback[tracker])
        assert not missing, (tracker, sorted(missing))
    # ... and the event files hold the values, which the docs' figure is drawn from.
    scalars = trackers.tensorboard_scalars(tmp_path / "tensorboard")
    assert [step for step, _ in scalars["train/dynamic_sampling/generated_completions"]] == [1, 2]
    assert all(tag in scalars for tag in trackers.PANELS)
