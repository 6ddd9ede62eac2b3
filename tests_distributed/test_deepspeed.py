"""DAPOTrainer with dynamic sampling on 2 CPU processes under DeepSpeed ZeRO-2 and ZeRO-3, launched as users launch
it: `accelerate launch --config_file recipes/accelerate/zero{2,3}.yaml`, with ``ddp_backend="gloo"`` in the trainer's
config (the one thing a CPU needs; without it accelerate runs every process alone, which the trainer refuses).

Each run is compared with the same run under DDP (torchrun): the first steps' losses of each rank agree within
LOSS_TOLERANCE (float32 throughout; on this model they are equal to the last printed digit).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
from test_distributed import (
    PIPELINE,
    SCREENING,
    assert_exact_resume,
    assert_pipelined_run,
    assert_ranks_agree,
    assert_screening_run,
    launch_two_processes,
    run_on_two_processes,
)

ROOT = Path(__file__).resolve().parents[1]
ZERO2 = str(ROOT / "trl_dapo_ext" / "recipes" / "accelerate" / "zero2.yaml")
ZERO3 = str(ROOT / "trl_dapo_ext" / "recipes" / "accelerate" / "zero3.yaml")
ON_CPU = {"use_cpu": False, "ddp_backend": "gloo"}  # DeepSpeed's engine on gloo (use_cpu=True would be plain DDP)
LOSS_TOLERANCE = 1e-5  # absolute, per micro-batch loss (the losses are ~0.1)
FIRST_STEPS = 2  # optimizer steps whose losses are compared (2 micro-batches each)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> list[dict]:
    return run_on_two_processes(tmp_path_factory.mktemp("ddp"), "agree,lora")


@pytest.fixture(scope="module")
def zero2(tmp_path_factory) -> list[dict]:
    return run_on_two_processes(tmp_path_factory.mktemp("zero2"), "agree,resume", ZERO2, ON_CPU)


@pytest.fixture(scope="module")
def zero3(tmp_path_factory) -> list[dict]:
    return run_on_two_processes(tmp_path_factory.mktemp("zero3"), "agree,lora", ZERO3, ON_CPU)


def assert_deepspeed_run(reports: list[dict], reference: list[dict], stage: int) -> None:
    """DeepSpeed's engine at ``stage`` trained on both ranks, which agree as under DDP and lose what DDP loses."""
    optimizer = {2: "DeepSpeedZeroOptimizer", 3: "DeepSpeedZeroOptimizer_Stage3"}[stage]
    for report in reports:
        sharded = report["engine"].pop("sharded_parameters")
        assert report["engine"] == {
            "wrapper": "DeepSpeedEngine",
            "distributed_type": "DEEPSPEED",
            "zero_stage": stage,
            "zero_optimizer": optimizer,
            "world_size": 2,
        }
        # ZeRO-3 leaves each process a shard of the parameters (all of them here); ZeRO-2 keeps them whole.
        assert (sharded > 0) == (stage == 3), sharded
    assert_ranks_agree(reports)
    assert [r["engine"]["wrapper"] for r in reference] == ["DistributedDataParallel"] * 2
    compared = FIRST_STEPS * 2
    for report, ddp_report in zip(reports, reference, strict=True):
        assert report["prompts"][:FIRST_STEPS] == ddp_report["prompts"][:FIRST_STEPS]
        differences = [abs(a - b) for a, b in zip(report["losses"][:compared], ddp_report["losses"][:compared])]
        assert len(differences) == compared and max(differences) <= LOSS_TOLERANCE, differences


def test_zero2_full_fine_tuning(zero2, ddp):
    assert_deepspeed_run([r["agree"] for r in zero2], [r["agree"] for r in ddp], stage=2)


def test_zero3_full_fine_tuning(zero3, ddp):
    assert_deepspeed_run([r["agree"] for r in zero3], [r["agree"] for r in ddp], stage=3)


def test_zero3_lora(zero3, ddp):
    assert_deepspeed_run([r["lora"] for r in zero3], [r["lora"] for r in ddp], stage=3)


def test_zero2_screening(tmp_path_factory):
    """Screening under ZeRO-2: equal rounds on both ranks, the main process's round sizes, the same losses as DDP."""
    zero2 = run_on_two_processes(tmp_path_factory.mktemp("zero2-screening"), "agree", ZERO2, {**ON_CPU, **SCREENING})
    ddp = run_on_two_processes(tmp_path_factory.mktemp("ddp-screening"), "agree", config=SCREENING)
    reports = [r["agree"] for r in zero2]
    assert_deepspeed_run(reports, [r["agree"] for r in ddp], stage=2)
    assert_screening_run(reports)


def test_zero2_pipelined_screening(tmp_path_factory):
    """Pipelined screening under ZeRO-2: one call per step, equal calls on both ranks, the carried probes' own
    checkpoint files, and the same trained parameters as under DDP."""
    zero2 = run_on_two_processes(tmp_path_factory.mktemp("zero2-pipeline"), "pipeline", ZERO2, {**ON_CPU, **PIPELINE})
    ddp = run_on_two_processes(tmp_path_factory.mktemp("ddp-pipeline"), "pipeline", config=PIPELINE)
    reports = [r["pipeline"] for r in zero2]
    assert [r["engine"]["wrapper"] for r in reports] == ["DeepSpeedEngine"] * 2
    assert_pipelined_run(reports)
    early = [
        [call["prompts"] for call in r["pipeline"]["calls"] if call["step"] < FIRST_STEPS] for r in (*zero2, *ddp)
    ]
    assert early[0] == early[2] and early[1] == early[3]  # each rank called as under DDP


def test_zero2_checkpoint_and_resume(zero2):
    """A ZeRO-2 checkpoint (DeepSpeed's own folder beside each rank's refill state) resumes exactly on both ranks."""
    reports = [r["resume"] for r in zero2]
    assert "global_step2" in reports[0]["checkpoint_files"]  # DeepSpeed's sharded optimizer state
    assert_exact_resume(reports)


def test_lone_processes_are_refused(tmp_path):
    """Without ddp_backend accelerate gives each CPU process a world of its own; the trainer stops with one line."""
    result = launch_two_processes(tmp_path, "agree", ZERO2, {"use_cpu": False})
    assert result.returncode != 0
    assert "LaunchError: the launcher started 2 processes (WORLD_SIZE=2) but accelerate runs 1" in result.stderr
    assert "ddp_backend='gloo'" in result.stderr


def test_fsdp2_on_a_cpu_is_refused(tmp_path):
    """TRL's own FSDP2 config: accelerate turns FSDP on only for GPU-like devices, so on a CPU the processes would run
    with distributed type NO (gather and reduce do nothing); the trainer stops with one line instead."""
    fsdp2 = str(files("trl") / "accelerate_configs" / "fsdp2.yaml")
    result = launch_two_processes(tmp_path, "agree", fsdp2, ON_CPU)
    assert result.returncode != 0
    assert "LaunchError: the accelerate config asks for FSDP but accelerate runs NO" in result.stderr
