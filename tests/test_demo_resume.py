"""`trl-dapo demo --resume`: a demo Ctrl-C stopped in a stage, resumed with the command it printed, ends as the
uninterrupted demo does (the same warm start, metrics and final weights)."""

from __future__ import annotations

import json
import os
import shlex
import signal

import pytest
import torch
from safetensors.torch import load_file
from trl import SFTTrainer

from trl_dapo_ext import DAPOTrainer
from trl_dapo_ext.cli import demo as demo_cli
from trl_dapo_ext.cli.demo import run as demo_run
from trl_dapo_ext.cli.demo import sft as demo_sft

# 40 warm-start steps: enough for some right answers, so RL has mixed groups and moves the weights (after 4, every
# reward is 0 and RL changes nothing). 5 RL steps: the report needs one logged step (logging_steps 5).
DEMO_ARGS = ["--quick", "--model-size", "tiny", "--sft-steps", "40", "--steps", "5"]
# What depends on the wall clock, not on the run.
TIMED = ("rl_seconds", "wall_seconds", "report")


def _results(output_dir) -> dict:
    summary = json.loads((output_dir / "demo_results.json").read_text())
    for result in summary["results"].values():
        for key in TIMED:
            result.pop(key, None)
    summary["settings"].pop("output_dir")
    return {key: summary[key] for key in ("settings", "sft_steps", "before", "results")}


def _uninterrupted(output_dir, *extra: str):
    assert demo_cli.main([*DEMO_ARGS, *extra, "--output-dir", str(output_dir)]) == 0
    warm, final = (load_file(output_dir / folder / "model.safetensors") for folder in ("sft/final", "final"))
    assert any(not torch.equal(warm[key], final[key]) for key in final)  # RL trained: equal weights say something
    return output_dir


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return _uninterrupted(tmp_path_factory.mktemp("uninterrupted"))


@pytest.fixture(scope="module")
def uninterrupted_compare(tmp_path_factory):
    """The demo with --compare: the DAPO stage, then plain GRPO from the same warm start (in rl-grpo/)."""
    output_dir = _uninterrupted(tmp_path_factory.mktemp("uninterrupted_compare"), "--compare")
    assert (output_dir / "rl-grpo").is_dir()
    return output_dir


def _press_ctrl_c_in_step(cls, step: int, stage: str):
    """``cls.training_step`` replaced by one that presses Ctrl-C (a real SIGINT) during step ``step`` of the demo's
    stage ``stage`` (the trainer whose output folder it is)."""
    inner = cls.training_step

    def training_step(self, *args, **kwargs):
        if self.state.global_step == step - 1 and os.path.basename(self.args.output_dir) == stage:
            os.kill(os.getpid(), signal.SIGINT)  # the step finishes, then the checkpoint is saved
        return inner(self, *args, **kwargs)

    return training_step


@pytest.mark.trainer
@pytest.mark.parametrize(("cls", "stage", "step"), [(SFTTrainer, "sft", 2), (DAPOTrainer, "rl-dapo", 3)])
def test_interrupted_then_resumed_demo_matches_the_uninterrupted_one(
    cls, stage, step, uninterrupted, tmp_path, monkeypatch, capsys
):
    _interrupt_resume_and_compare(cls, stage, step, [], uninterrupted, tmp_path, monkeypatch, capsys)


@pytest.mark.trainer
def test_a_compare_demo_interrupted_in_its_grpo_stage_resumes_to_the_uninterrupted_one(
    uninterrupted_compare, tmp_path, monkeypatch, capsys
):
    """With --compare, the DAPO stage finished before the Ctrl-C: the resumed demo takes its results from the progress
    file and resumes plain GRPO from its own checkpoint, and both stages match the uninterrupted comparison."""
    resumed_from = []
    train = DAPOTrainer.train

    def recording_train(self, resume_from_checkpoint=None, *args, **kwargs):
        resumed_from.append((os.path.basename(self.args.output_dir), resume_from_checkpoint))
        return train(self, resume_from_checkpoint, *args, **kwargs)

    monkeypatch.setattr(DAPOTrainer, "train", recording_train)
    out = _interrupt_resume_and_compare(
        DAPOTrainer, "rl-grpo", 3, ["--compare"], uninterrupted_compare, tmp_path, monkeypatch, capsys
    )
    assert "RL (dapo): finished before" in out  # not trained again
    # Interrupted: DAPO, then GRPO until the Ctrl-C; resumed: GRPO only, from its own checkpoint (not from scratch).
    checkpoint = str(tmp_path / "demo" / "rl-grpo" / "checkpoint-3")
    assert resumed_from == [("rl-dapo", None), ("rl-grpo", None), ("rl-grpo", checkpoint)]
    resumed, reference = (
        load_file(d / "rl-grpo" / "checkpoint-5" / "model.safetensors")
        for d in (tmp_path / "demo", uninterrupted_compare)
    )
    assert all(torch.equal(resumed[key], reference[key]) for key in reference)  # GRPO's own last weights


def _interrupt_resume_and_compare(cls, stage, step, extra, uninterrupted, tmp_path, monkeypatch, capsys):
    output_dir = tmp_path / "demo"
    argv = [*DEMO_ARGS, *extra, "--output-dir", str(output_dir)]
    with monkeypatch.context() as patch:
        patch.setattr(cls, "training_step", _press_ctrl_c_in_step(cls, step, stage))
        assert demo_cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"saved a full checkpoint in {output_dir / stage / f'checkpoint-{step}'}" in err
    (line,) = [line for line in err.splitlines() if line.startswith("resume with: ")]
    command = shlex.split(line.removeprefix("resume with: "))
    assert command == ["trl-dapo", "demo", *argv, "--resume"]

    assert demo_cli.main(command[2:]) == 0  # the printed command
    out = capsys.readouterr().out
    if stage != "sft":
        assert "finished before: loaded" in out  # the warm start was not run again
    assert _results(output_dir) == _results(uninterrupted)
    resumed, reference = (load_file(d / "final" / "model.safetensors") for d in (output_dir, uninterrupted))
    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[key], reference[key]) for key in reference)
    return out


def test_resume_without_an_interrupted_demo_is_one_line(tmp_path, capsys):
    assert demo_cli.main(["--output-dir", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path} holds no interrupted demo" in err


def test_resume_with_other_settings_says_which(tmp_path, capsys):
    (tmp_path / "demo_progress.json").write_text(json.dumps({"settings": {"seed": 1}}))
    assert demo_cli.main(["--output-dir", str(tmp_path), "--seed", "2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed 1 there, 2 now" in err


@pytest.mark.trainer
def test_ctrl_c_after_the_warm_start_prints_the_resume_line_and_resume_skips_it(tmp_path, monkeypatch, capsys):
    argv = ["--quick", "--model-size", "tiny", "--sft-steps", "2", "--steps", "5", "--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:

        def pressed(*args, **kwargs):
            raise KeyboardInterrupt  # Ctrl-C in the evaluation after the warm start: no stage is running

        patch.setattr(demo_run, "evaluate", pressed)
        assert demo_cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "no training stage was running" in err and "Traceback" not in err
    assert f"resume with: trl-dapo demo {shlex.join(argv)} --resume" in err
    assert (tmp_path / "sft" / "final" / "model.safetensors").is_file()

    with monkeypatch.context() as patch:
        patch.setattr(demo_sft, "warm_start", lambda *args, **kwargs: pytest.fail("the warm start ran again"))
        assert demo_cli.main([*argv, "--resume"]) == 0
    assert "warm start: 2 steps, finished before" in capsys.readouterr().out
    assert json.loads((tmp_path / "demo_results.json").read_text())["sft_steps"] == 2
