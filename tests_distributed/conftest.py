"""The distributed lane (`make test-distributed`): DAPOTrainer with dynamic sampling on 2 CPU processes under
DeepSpeed ZeRO-2 and ZeRO-3, launched by `accelerate launch` with the project's accelerate configs, in its own venv
(deepspeed). Not collected by the main suite (pyproject testpaths = tests).

The launcher and the script each process runs are the main suite's DDP ones (tests/test_distributed.py,
tests/distributed_dynamic_sampling.py), so DeepSpeed runs are checked with the same assertions as DDP runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import deepspeed  # noqa: E402, F401  (this lane without DeepSpeed would test nothing: fail at collection)
