"""Launch checks: a launch whose processes do not form the job the launcher asked for is refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trl_dapo_ext import LaunchError
from trl_dapo_ext.launch import check_launch


def state(num_processes: int, distributed_type: str) -> SimpleNamespace:
    return SimpleNamespace(num_processes=num_processes, distributed_type=f"DistributedType.{distributed_type}")


@pytest.mark.parametrize(
    "accelerator, environ",
    [
        (state(1, "NO"), {}),  # a plain single process
        (state(2, "MULTI_CPU"), {"WORLD_SIZE": "2"}),  # DDP on gloo
        (state(2, "DEEPSPEED"), {"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true"}),
        (state(1, "DEEPSPEED"), {"WORLD_SIZE": "1", "ACCELERATE_USE_DEEPSPEED": "true"}),
    ],
)
def test_launches_that_form_the_job_pass(accelerator, environ):
    check_launch(accelerator, environ)


def test_processes_that_each_run_alone_are_refused():
    # accelerate without CUDA and without a backend: every rank a world of its own (DeepSpeed or torchrun DDP alike)
    for kind, environ in [("DEEPSPEED", {"ACCELERATE_USE_DEEPSPEED": "true"}), ("NO", {})]:
        with pytest.raises(LaunchError, match=r"started 2 processes \(WORLD_SIZE=2\) but accelerate runs 1 .*gloo"):
            check_launch(state(1, kind), {"WORLD_SIZE": "2", **environ})


def test_deepspeed_dropped_by_accelerate_is_refused():
    environ = {"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_USE_CPU": "true"}
    with pytest.raises(
        LaunchError, match="asks for DeepSpeed but accelerate runs MULTI_CPU because ACCELERATE_USE_CPU"
    ):
        check_launch(state(2, "MULTI_CPU"), environ)
    with pytest.raises(LaunchError, match="asks for DeepSpeed but accelerate runs MULTI_CPU: on a CPU"):
        check_launch(state(2, "MULTI_CPU"), {**environ, "ACCELERATE_USE_CPU": "false"})


def test_fsdp_dropped_on_a_cpu_and_collectives_that_do_nothing_are_refused():
    environ = {"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true"}
    for kind in ("NO", "MULTI_CPU"):
        with pytest.raises(LaunchError, match=f"asks for FSDP but accelerate runs {kind}: .* never on a CPU"):
            check_launch(state(2, kind), environ)
    check_launch(state(2, "FSDP"), environ)
    with pytest.raises(LaunchError, match="2 processes with no distributed type: its gather and reduce"):
        check_launch(state(2, "NO"), {"WORLD_SIZE": "2"})
