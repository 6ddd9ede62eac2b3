"""Checks that the processes a launcher started form the job it asked for (several processes, DeepSpeed, FSDP).

`accelerate launch` (and `torchrun`) start N processes and tell each its rank in ``WORLD_SIZE``/``RANK``; accelerate's
DeepSpeed and FSDP configs also set ``ACCELERATE_USE_DEEPSPEED=true`` / ``ACCELERATE_USE_FSDP=true``. Three
combinations then fail silently:

* no CUDA and no backend named: accelerate picks no collective backend and every process runs alone
  (``num_processes=1``, ``process_index=0`` everywhere: no data sharding, N "main" processes). On a CPU the fix is
  TrainingArguments' own ``ddp_backend="gloo"`` (``--ddp_backend gloo``), or ``use_cpu=True`` for plain DDP;
* ``ACCELERATE_USE_CPU=true`` (``accelerate launch --cpu``, ``use_cpu: true`` in the accelerate config) with a
  DeepSpeed config: accelerate drops DeepSpeed for plain DDP;
* an FSDP config on a CPU: accelerate turns FSDP on only for GPU-like devices, so it runs DDP (``use_cpu=True``) or,
  with ``ddp_backend="gloo"``, N processes of distributed type NO whose gather and reduce do nothing.

Example:
    >>> from types import SimpleNamespace
    >>> check_launch(SimpleNamespace(num_processes=2, distributed_type="DEEPSPEED"),
    ...              {"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true"})  # what was asked for: nothing raised
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class LaunchError(RuntimeError):
    """The processes of a launch do not form the job the launcher asked for."""


def check_launch(accelerator: Any, environ: Mapping[str, str] | None = None) -> None:
    """Raise `LaunchError` when ``accelerator`` (a trainer's, or its state) runs fewer processes than the launcher
    started, runs without the DeepSpeed or FSDP that accelerate's config asked for, or runs several processes whose
    collectives do nothing."""
    environ = os.environ if environ is None else environ
    started = int(environ.get("WORLD_SIZE", "1") or 1)
    kind = str(accelerator.distributed_type).rsplit(".", 1)[-1]
    if started > 1 and accelerator.num_processes != started:
        raise LaunchError(
            f"the launcher started {started} processes (WORLD_SIZE={started}) but accelerate runs "
            f"{accelerator.num_processes} per group: each process trains alone on the same data. Without CUDA "
            "accelerate picks no collective backend: set ddp_backend='gloo' (--ddp_backend gloo), or use_cpu=True "
            "for plain DDP (docs/recipes.md#several-gpus)"
        )
    if _flag(environ, "ACCELERATE_USE_DEEPSPEED") and kind != "DEEPSPEED":
        why = " because ACCELERATE_USE_CPU=true (accelerate launch --cpu, or use_cpu: true in its config)"
        raise LaunchError(
            f"the accelerate config asks for DeepSpeed but accelerate runs {kind}"
            f"{why if _flag(environ, 'ACCELERATE_USE_CPU') else ''}: on a CPU drop --cpu and set "
            "ddp_backend='gloo' (docs/recipes.md#several-gpus)"
        )
    if _flag(environ, "ACCELERATE_USE_FSDP") and kind != "FSDP":
        raise LaunchError(
            f"the accelerate config asks for FSDP but accelerate runs {kind}: accelerate turns FSDP on only for "
            "GPU-like devices (CUDA, XPU, NPU, ...), never on a CPU; there use DeepSpeed ZeRO-3 "
            "(the shipped accelerate/zero3 config: trl-dapo recipes path accelerate/zero3; docs/recipes.md#several-gpus)"
        )
    if accelerator.num_processes > 1 and kind == "NO":
        raise LaunchError(
            f"accelerate runs {accelerator.num_processes} processes with no distributed type: its gather and "
            "reduce would return each process's own values, so the processes would disagree. On a CPU use "
            "use_cpu=True (DDP) or a DeepSpeed config with ddp_backend='gloo' (docs/recipes.md#several-gpus)"
        )


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "false").lower() == "true"
