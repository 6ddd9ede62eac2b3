"""The command line and its messages as a new user meets them (issue 18): Ctrl-C, column checks before the model
loads, NaN/None rewards diagnosed as such, honest zero-variance and entropy metrics, `train --help`, "did you mean",
start-up checks (vLLM, context length), the CPU recipe, the demo's help, and the report's legends."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset
from helpers import constant_reward, tiny_trainer

from reward_funcs import code_reward, make_code_reward, math_reward
from reward_funcs.inputs import MissingColumnError
from trl_dapo_ext import DAPOTrainer, DynamicSamplingExhausted, RewardFunctionError
from trl_dapo_ext.cli import demo as demo_cli
from trl_dapo_ext.cli import main as cli_main
from trl_dapo_ext.cli import train as train_cli
from trl_dapo_ext.metric_names import N
from trl_dapo_ext.tiny import save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--use_cpu", "true", "--bf16", "false", "--use_vllm", "false", "--gradient_checkpointing", "false"]
SHORT = ["--max_completion_length", "8"]  # the tiny models have a context of 64 tokens


@pytest.fixture
def tiny_model_dir(tmp_path):
    return save_tiny_model(tmp_path / "tiny-model", max_positions=64)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _no_model_loading(monkeypatch):
    """Fail the test if `trl-dapo train` gets as far as building the trainer (which loads the model)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the trainer (and the model) was built before the check")

    monkeypatch.setattr("trl_dapo_ext.DAPOTrainer", refuse)


# ------------------------------------------------------------------------------------------------- 1. Ctrl-C


REWARD_THAT_PRESSES_CTRL_C = '''
import os, signal

calls = 0


def ctrl_c_reward(completions, **kwargs):
    """Scores like a verifier; at the second call (step 2) the user presses Ctrl-C ($CTRL_C_PRESSES times)."""
    global calls
    calls += 1
    if calls == 2:
        for _ in range(int(os.environ.get("CTRL_C_PRESSES", "0"))):
            os.kill(os.getpid(), signal.SIGINT)
    return [float(len(c) % 2) for c in completions]
'''


def _train_with_ctrl_c(tmp_path, tiny_model_dir, presses: int, argv: list[str] | None = None):
    """`trl-dapo train` (4 steps) in a child process whose reward presses Ctrl-C ``presses`` times in step 2."""
    (tmp_path / "ctrl_c_rewards.py").write_text(REWARD_THAT_PRESSES_CTRL_C)
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(16)])
    argv = argv or [
        "train", "--model_name_or_path", str(tiny_model_dir),
        "--dataset_name", str(data), "--use_chat_template", "false", "--reward_funcs", "ctrl_c_rewards.ctrl_c_reward",
        *CPU, "--max_steps", "4", "--per_device_train_batch_size", "8", "--num_generations", "4",
        "--max_completion_length", "8", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
        "--output_dir", str(tmp_path / "run"),
    ]  # fmt: skip
    # The installed TRL in the child (the TRL 1.15 lane's CPU shim cannot reach another process).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "OMP_NUM_THREADS": "1",
        "CTRL_C_PRESSES": str(presses),
    }
    command = [sys.executable, "-m", "trl_dapo_ext.cli.main", *argv]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.trainer
def test_train_ctrl_c_saves_a_checkpoint_and_prints_the_command_that_resumes_it(tmp_path, tiny_model_dir):
    result = _train_with_ctrl_c(tmp_path, tiny_model_dir, presses=1)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    checkpoint = tmp_path / "run" / "checkpoint-2"  # step 2 finished, then the run stopped
    assert f"saved a full checkpoint in {checkpoint}" in result.stderr
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        assert (checkpoint / name).is_file(), name
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("resume with: ")]
    command = shlex.split(line.removeprefix("resume with: "))
    assert command[:2] == ["trl-dapo", "train"] and command[-2:] == ["--resume_from_checkpoint", str(checkpoint)]

    resumed = _train_with_ctrl_c(tmp_path, tiny_model_dir, presses=0, argv=command[1:])  # the printed command, run
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["global_step"] == 4


@pytest.mark.trainer
def test_train_second_ctrl_c_stops_at_once_and_saves_the_model_and_state(tmp_path, tiny_model_dir):
    result = _train_with_ctrl_c(tmp_path, tiny_model_dir, presses=2)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "resume with" not in result.stderr
    folder = tmp_path / "run" / "interrupted"
    assert f"saved in {folder}" in result.stderr and "during step 2" in result.stderr
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 1


def test_train_ctrl_c_before_training_says_nothing_was_saved(tmp_path, tiny_model_dir, monkeypatch, capsys):
    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli.run, "load_train_dataset", pressed)
    argv = ["--model_name_or_path", str(tiny_model_dir), "--dataset_name", "x.jsonl", "--output_dir", "o", *CPU]
    assert train_cli.main([*argv, *SHORT]) == 130
    assert "training had not started, nothing was saved" in capsys.readouterr().err


def _ctrl_c_at(cls, at: int):
    """A replacement for ``cls.training_step`` whose ``at``-th call raises KeyboardInterrupt (the user's Ctrl-C)."""
    inner, calls = cls.training_step, []

    def training_step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return inner(self, *args, **kwargs)

    return training_step


DEMO_ARGS = ["--quick", "--model-size", "tiny", "--sft-steps", "3", "--steps", "3"]


@pytest.mark.trainer
def test_demo_ctrl_c_in_the_warm_start_saves_the_warm_start(tmp_path, monkeypatch, capsys):
    from trl import SFTTrainer

    monkeypatch.setattr(SFTTrainer, "training_step", _ctrl_c_at(SFTTrainer, at=2))
    assert demo_cli.main([*DEMO_ARGS, "--output-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    folder = tmp_path / "sft" / "interrupted"
    assert f"saved in {folder}" in err and "latest checkpoint" not in err
    assert (folder / "model.safetensors").is_file()
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 1


@pytest.mark.trainer
def test_demo_ctrl_c_in_rl_names_the_folder_it_wrote(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(DAPOTrainer, "training_step", _ctrl_c_at(DAPOTrainer, at=1))
    assert demo_cli.main([*DEMO_ARGS, "--output-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    folder = tmp_path / "rl-dapo" / "interrupted"
    assert f"saved in {folder}" in err and "during step 1" in err
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 0
    assert (folder / "model.safetensors").is_file()


@pytest.mark.trainer
def test_demo_first_ctrl_c_in_rl_saves_a_full_checkpoint(tmp_path, monkeypatch, capsys):
    inner = DAPOTrainer.training_step

    def training_step(self, *args, **kwargs):
        if self.state.global_step == 0:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C during step 1: the step finishes first
        return inner(self, *args, **kwargs)

    monkeypatch.setattr(DAPOTrainer, "training_step", training_step)
    assert demo_cli.main([*DEMO_ARGS, "--output-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    checkpoint = tmp_path / "rl-dapo" / "checkpoint-1"
    assert f"saved a full checkpoint in {checkpoint}" in err and "Traceback" not in err
    for name in ("model.safetensors", "optimizer.pt", "rng_state.pth", "dapo_refill_state.json"):
        assert (checkpoint / name).is_file(), name  # although the demo saves models only otherwise


def test_demo_ctrl_c_between_stages_says_what_exists(tmp_path, monkeypatch, capsys):
    def pressed(settings, resume):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_cli, "run_demo", pressed)
    assert demo_cli.main(["--output-dir", str(tmp_path)]) == 130
    assert "nothing was saved yet" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- 2. columns and malformed tests


@pytest.mark.parametrize(
    ("reward", "row", "flag"),
    [
        ("math_reward", {"prompt": "1+1=", "gold": "2"}, "--answer_column"),
        ("code_reward", {"prompt": "f"}, "--tests_column"),
    ],
)
def test_train_checks_reward_columns_before_the_model_loads(
    reward, row, flag, tmp_path, tiny_model_dir, monkeypatch, capsys
):
    _no_model_loading(monkeypatch)
    data = _jsonl(tmp_path / "d.jsonl", [row] * 4)
    argv = ["--model_name_or_path", str(tiny_model_dir), "--dataset_name", str(data), "--reward_funcs", reward]
    assert (
        train_cli.main([*argv, "--use_chat_template", "false", "--output_dir", str(tmp_path / "o"), *CPU, *SHORT]) == 2
    )
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("trl-dapo train: error:")]
    assert f"{reward} needs" in line and flag in line
    assert "columns present: ['" in err and "Traceback" not in err


def test_library_rewards_raise_one_clear_error_without_their_column():
    with pytest.raises(MissingColumnError, match=r"math_reward needs the gold answer .*'answer' \(or 'solution'\)"):
        math_reward(["#### 2"], prompts=["1+1="], question=["1+1="])
    with pytest.raises(MissingColumnError, match=r"code_reward needs the unit tests .*--tests_column") as error:
        code_reward(["x = 1"], prompts=["p"], task_id=[1])  # TRL passes columns by name: no `tests` keyword
    assert "columns present: ['task_id']" in str(error.value)  # TRL's own keywords are not columns
    with pytest.raises(MissingColumnError, match="code_reward_partial needs the unit tests"):
        make_code_reward(partial_credit=True)(["x = 1"])


@pytest.mark.parametrize(
    ("tests", "says"),
    [
        ([[42]], "a tests list must hold assert statements as strings (MBPP's test_list), but item 0 is list [42]"),
        (["assert f(1) == 1", 3], "item 1 is int 3"),
        (42, "tests must be a string of assert statements, a list of such strings, or a dict"),
        ({"inputs": ["1\n"]}, "'outputs' is missing or not a list (keys present: ['inputs'])"),
        ({"inputs": ["1\n"], "outputs": ["1\n", "2\n"]}, "got 1 inputs and 2 outputs"),
    ],
)
def test_malformed_tests_name_what_is_wrong(tests, says):
    reward = make_code_reward(timeout_s=2, name=f"code_reward_{id(tests)}")  # its own warn-once memory
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert reward(["```python\ndef f(x):\n    return x\n```"], tests=[tests]) == [None]
    messages = [str(w.message) for w in caught]
    assert any(says in m for m in messages), messages
    assert not any("unsupported tests value of type list" in m for m in messages)


# ---------------------------------------------------------------------------------------------- 3 and 4: trainer


def _nan_reward(completions, **kwargs):
    return [None] * len(completions)


def _ds_trainer(make_model, tokenizer, tmp_path, reward, **overrides):
    dataset = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(24)]})
    overrides = {"dynamic_sampling": True, "dynamic_sampling_max_rounds": 2, "max_steps": 2, **overrides}
    return tiny_trainer(make_model(seed=2), reward, dataset, tokenizer, tmp_path, **overrides)


@pytest.mark.trainer
def test_all_nan_rewards_are_diagnosed_as_such(make_model, tokenizer, tmp_path):
    trainer = _ds_trainer(make_model, tokenizer, tmp_path, _nan_reward)
    with pytest.raises(DynamicSamplingExhausted) as error:
        trainer.train()
    message = str(error.value)
    # Every completion of both rounds, counted per reward function, at the first step (step 1 to a user).
    match = re.search(r"at step 1: 0 scorable completions, your reward returned NaN/None for all (\d+) ", message)
    assert match and int(match[1]) >= 16, message
    assert f"(_nan_reward: {match[1]} of {match[1]} NaN/None)" in message
    assert "mixed difficulty" not in message and ".." not in message


@pytest.mark.trainer
def test_reward_errors_count_steps_from_one_without_doubled_periods(make_model, tokenizer, tmp_path):
    def strict_reward(completions, **kwargs):
        raise ValueError("the column holds no answers.")

    trainer = _ds_trainer(make_model, tokenizer, tmp_path, strict_reward)
    with pytest.raises(RewardFunctionError) as error:
        trainer.train()
    message = str(error.value)
    assert "at training step 1:" in message and "no answers." in message and ".." not in message
    assert "Fix the function" not in message  # a ValueError explains an input problem, not a bug


@pytest.mark.trainer
def test_zero_variance_split_adds_up_and_an_empty_batch_logs_no_entropy(make_model, tokenizer, tmp_path):
    # A constant reward: every group is zero-variance, every batch is filled and masked, no loss token at all.
    trainer = _ds_trainer(make_model, tokenizer, tmp_path, constant_reward, dynamic_sampling_on_exhausted="fill")
    with pytest.warns(UserWarning, match="masked out of the loss"):
        trainer.train()
    logs = [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h]
    assert len(logs) == 2
    for entry in logs:
        split = [
            entry[f"dynamic_sampling/{k}"] for k in ("all_max_groups", "all_min_groups", "other_zero_variance_groups")
        ]
        assert (
            sum(split) == entry[N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS] == entry[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS]
        )
        assert entry[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == 2
        assert entry.get("entropy") is None  # not 0.0: there was no token to measure it on
        assert entry.get("clip_ratio/region_mean") is None


# ----------------------------------------------------------------------------------- 5. help and "did you mean"


def test_train_help_starts_with_a_description_and_groups_our_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["train", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "usage: trl-dapo train --config RECIPE [--KEY VALUE ...]"
    assert lines[2].startswith("Train a model with DAPO/GRPO from a YAML recipe")
    assert "trl-dapo train --config tiny_cpu" in text and "trl-dapo recipes" in text
    titles = [
        "data and rewards (trl-dapo train):",
        "DAPO extensions (DAPOConfig; off by default):",
        "model, LoRA and quantization (trl.ModelConfig):",
        "TRL GRPOConfig and transformers TrainingArguments options:",
    ]
    where = [lines.index(title) for title in titles]
    assert where == sorted(where)

    def group_of(flag: str) -> str:
        line = next(i for i, line in enumerate(lines) if line.strip().startswith(flag + " "))
        return titles[max(i for i, start in enumerate(where) if start < line)]

    assert group_of("--answer_column") == titles[0]
    assert group_of("--dynamic_sampling") == titles[1] and group_of("--overlong_buffer_length") == titles[1]
    assert group_of("--lora_r") == titles[2]
    assert group_of("--learning_rate") == titles[3] and group_of("--epsilon_high") == titles[3]


def test_unknown_recipe_key_and_flag_get_did_you_mean(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("output_dir: out\ndynamic_samplng: true\n")
    assert train_cli.main(["--config", str(recipe), *CPU]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe key dynamic_samplng (did you mean dynamic_sampling?)" in err
    assert "add them to the dataclass" not in err
    assert train_cli.main(["--output_dir", "o", "--answr_column", "gold", "--lerning_rate", "1e-5", *CPU]) == 2
    err = capsys.readouterr().err
    assert (
        "unknown flags --answr_column (did you mean --answer_column?), " in err
        and "--lerning_rate (did you mean --learning_rate?)" in err
    )


# ------------------------------------------------------------------------------------------- 6. start-up checks


def test_use_vllm_without_vllm_is_one_line_at_start_up(tmp_path, tiny_model_dir, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    real = train_cli.model.importlib.util.find_spec
    monkeypatch.setattr(
        train_cli.model.importlib.util, "find_spec", lambda name: None if name == "vllm" else real(name)
    )
    argv = ["--model_name_or_path", str(tiny_model_dir), "--dataset_name", "x.jsonl", "--output_dir", "o"]
    assert train_cli.main([*argv, *CPU, *SHORT, "--use_vllm", "true"]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("trl-dapo train: error:")]
    assert "use_vllm is true but vLLM is not installed" in line and "--use_vllm false" in line
    assert "Traceback" not in err


def test_completion_budget_beyond_the_context_is_an_error_with_the_numbers(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    _no_model_loading(monkeypatch)
    argv = ["--model_name_or_path", str(tiny_model_dir), "--dataset_name", "x.jsonl", "--output_dir", "o", *CPU]
    assert train_cli.main([*argv, "--max_completion_length", "100"]) == 2
    err = capsys.readouterr().err
    assert "max_completion_length=100 does not fit the model's context of 64 tokens" in err


@pytest.mark.trainer
def test_tiny_cpu_recipe_trains_the_demo_model(tmp_path, capsys):
    """The recipe as documented, by name, with the demo's tiny model (here untrained; the recipe uses
    runs/demo/final) and its data file found beside the recipe."""
    recipe = ROOT / "trl_dapo_ext" / "recipes" / "tiny_cpu.yaml"
    values = yaml.safe_load(recipe.read_text())
    assert values["model_name_or_path"] == "runs/demo/final" and values["use_cpu"] and not values["use_vllm"]
    tokenizer, model = demo_cli.build_tokenizer_and_model("tiny", seed=0)
    model.save_pretrained(tmp_path / "demo-final")
    tokenizer.save_pretrained(tmp_path / "demo-final")
    output = tmp_path / "run"
    argv = [
        "train", "--config", "tiny_cpu", "--model_name_or_path", str(tmp_path / "demo-final"),
        "--max_steps", "2", "--logging_steps", "1",
        "--disable_tqdm", "true",
        "--output_dir", str(output),
    ]  # fmt: skip
    assert cli_main.main(argv) == 0
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and (output / "model.safetensors").is_file() and (output / "report.png").is_file()


# ------------------------------------------------------------------------------------------------- 8. smaller


def test_demo_help_shows_defaults_and_what_quick_changes(capsys):
    with pytest.raises(SystemExit):
        demo_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"RL steps (default {demo_cli.DemoSettings.rl_steps}; {demo_cli.QUICK['rl_steps']} with --quick)" in text
    assert f"(default {demo_cli.DemoSettings.output_dir})" in text
    for key, value in demo_cli.QUICK.items():
        assert f"{key} {value:g}" in text
    assert "checks the pipeline, not learning" in text


def test_quick_demo_says_what_a_smoke_run_can_and_cannot_show(monkeypatch, capsys):
    monkeypatch.setattr(demo_cli, "run_demo", lambda settings, resume: {})
    assert demo_cli.main(["--quick"]) == 0
    assert "smoke run" in capsys.readouterr().out
    assert demo_cli.main([]) == 0
    assert "smoke run" not in capsys.readouterr().out


def _synthetic_report_history(steps: int = 6) -> list[dict]:
    keys = [
        "reward", "reward_std", N.LENGTH_TASK_ACCURACY, N.GROUPS_PASS_AT_1, N.GROUPS_PASS_AT_K, N.GROUPS_FRAC_MIXED,
        N.GROUPS_FRAC_ALL_MAX, N.GROUPS_FRAC_ALL_MIN, "frac_reward_zero_std", N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS,
        N.DYNAMIC_SAMPLING_RETAINED_GROUPS, N.DYNAMIC_SAMPLING_FILLED_GROUPS, N.DYNAMIC_SAMPLING_ALL_MAX_GROUPS,
        N.DYNAMIC_SAMPLING_ALL_MIN_GROUPS, N.DYNAMIC_SAMPLING_OTHER_ZERO_VARIANCE_GROUPS,
        N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS, N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS, "entropy",
        "clip_ratio/region_mean", "loss", "grad_norm", "completions/mean_length", N.LENGTH_TRUNCATED_FRAC,
    ]  # fmt: skip
    return [{"step": s, **{k: 0.5 + 0.01 * s * (i % 5) for i, k in enumerate(keys)}} for s in range(1, steps + 1)]


def test_report_legends_overlap_no_panel_and_show_every_zero_variance_bucket(tmp_path):
    from matplotlib.transforms import Bbox

    from trl_dapo_ext.cli.report import draw
    from trl_dapo_ext.cli.report import panels as report_panels

    history = _synthetic_report_history()
    panels = [p for p in report_panels.panels_for(history) if report_panels.has_data(history, p)]
    figure = draw.build_figure(history, panels, None, title="t")
    renderer = figure.canvas.get_renderer()
    axes = [ax for ax in figure.axes if ax.get_visible()]
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
    assert len(legends) == len(panels)
    boxes = [legend.get_window_extent(renderer) for legend in legends]
    for box in boxes:
        assert not any(Bbox.intersection(box, ax.get_window_extent(renderer)) for ax in axes), "legend over a panel"
        assert Bbox.intersection(box, figure.bbox) is not None and box.y0 >= 0  # inside the figure
    for i, first in enumerate(boxes):
        assert not any(Bbox.intersection(first, other) for other in boxes[i + 1 :]), "two legends overlap"
    labels = {text.get_text() for legend in legends for text in legend.get_texts()}
    assert "other zero-variance" in labels


def test_main_turns_a_stray_ctrl_c_into_status_130(monkeypatch, capsys):
    def pressed(argv, prog):
        raise KeyboardInterrupt

    monkeypatch.setattr("trl_dapo_ext.cli.report.main", pressed)
    assert cli_main.main(["report", "somewhere"]) == 130
    assert "trl-dapo report: interrupted" in capsys.readouterr().err


def test_entropy_blanking_only_touches_values_of_the_empty_batch():
    from trl_dapo_ext.core.metrics import blank_token_means

    logged = {"entropy": [1.0, 0.0], "clip_ratio/high_mean": [0.0], "policy_loss": [0.1]}
    blank_token_means(logged, {"entropy": 1, "clip_ratio/high_mean": 0})
    assert logged["entropy"][0] == 1.0 and torch.isnan(torch.tensor(logged["entropy"][1]))
    assert torch.isnan(torch.tensor(logged["clip_ratio/high_mean"][0])) and logged["policy_loss"] == [0.1]
    assert "kl" not in logged  # a metric that was never logged is not created
