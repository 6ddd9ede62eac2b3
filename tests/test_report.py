"""`trl-dapo report`: a real plain-TRL run, a synthetic DAPO run with every metric, and garbage inputs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import digit_fraction_reward, grpo_kwargs
from PIL import Image

from trl_dapo_ext.cli.main import main
from trl_dapo_ext.cli.report import COMPLETIONS_PANEL, PANELS, build_report

ALL_TITLES = [panel.title for panel in PANELS]
PLAIN_TRL_TITLES = [
    "Reward and accuracy",
    "Zero-variance split",
    "Lengths and truncation",
    "Time split",
    "Clip ratios and entropy",
    "Loss and gradient norm",
]


def _panels_line(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("panels: "))
    return line.removeprefix("panels: ").split("; ")


def _check_png(path: Path, panels: int) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    # 2 columns of 700 px at 100 dpi; 340 to 460 px per row of panels (each legend sits below its panel).
    assert width == 1400 if panels > 1 else width == 700
    assert 340 * math.ceil(panels / 2) <= height <= 460 * math.ceil(panels / 2) + 120


# ------------------------------------------------------------------------------------------------ a real TRL run


@pytest.fixture(scope="module")
def plain_trl_run(tmp_path_factory, tokenizer):
    """A 3-step trl.GRPOTrainer run with completion logging; the state written by trainer.save_state()."""
    import trl
    from datasets import Dataset

    from trl_dapo_ext.tiny import build_tiny_causal_lm

    output_dir = tmp_path_factory.mktemp("plain-trl")
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(24)]})
    trainer = trl.GRPOTrainer(
        model=build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1),
        reward_funcs=digit_fraction_reward,
        args=trl.GRPOConfig(**grpo_kwargs(output_dir, log_completions=True)),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_state()  # save_strategy="no" writes no trainer_state.json by itself
    return output_dir


@pytest.mark.trainer
def test_report_on_a_plain_trl_run(plain_trl_run, capsys):
    assert main(["report", str(plain_trl_run)]) == 0
    printed = capsys.readouterr().out
    expected = PLAIN_TRL_TITLES + [COMPLETIONS_PANEL]
    assert _panels_line(printed) == expected
    assert _panels_line((plain_trl_run / "report.txt").read_text()) == expected
    assert "completions: 24 logged rows" in printed  # 3 steps x generation batch of 8
    assert "steps 1..3" in printed
    _check_png(plain_trl_run / "report.png", len(expected))


@pytest.mark.trainer
def test_report_console_entry_and_out_path(plain_trl_run, tmp_path):
    out = tmp_path / "nested" / "dash.png"
    result = _run_cli("report", str(plain_trl_run), "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    _check_png(out, len(PLAIN_TRL_TITLES) + 1)
    assert _panels_line((tmp_path / "nested" / "dash.txt").read_text())[0] == "Reward and accuracy"


@pytest.mark.trainer
def test_report_falls_back_to_the_newest_checkpoint(plain_trl_run, tmp_path):
    state = json.loads((plain_trl_run / "trainer_state.json").read_text())
    for step in (2, 10):  # numeric, not lexical, order: checkpoint-10 is the newest
        (tmp_path / f"checkpoint-{step}").mkdir()
        kept = [entry for entry in state["log_history"] if entry["step"] <= step]
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({**state, "log_history": kept}))
    report = build_report(tmp_path)
    assert "state: checkpoint-10/trainer_state.json" in report.summary
    assert "steps 1..3" in report.summary
    assert COMPLETIONS_PANEL not in report.panels  # no completions/ folder here


# --------------------------------------------------------------------------------------- a synthetic DAPO run


def _synthetic_history(steps: int = 12) -> list[dict]:
    history = []
    for step in range(1, steps + 1):
        progress = step / steps
        entry = {
            "step": step,
            "epoch": progress,
            "loss": 0.01 * (1 - progress),
            "grad_norm": 0.5 + 0.1 * progress,
            "learning_rate": 1e-6,
            "reward": 0.2 + 0.5 * progress,
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.4 - 0.2 * progress,
            "rewards/accuracy/mean": 0.3 + 0.5 * progress,
            "rewards/overlong_penalty/mean": -0.1,
            "completions/mean_length": 300 + 10 * step,
            "completions/min_length": 100,
            "completions/max_length": 512,
            "completions/clipped_ratio": 0.05,
            "entropy": 1.2 - 0.3 * progress,
            "clip_ratio/low_mean": 0.001,
            "clip_ratio/high_mean": 0.002,
            "clip_ratio/region_mean": 0.003,
            "kl": 0.001 * step,
            "step_time": 10.0,
            "num_tokens": 1000.0 * step,
            "dynamic_sampling/rounds": 2 + step % 2,
            "dynamic_sampling/attempted_groups": 24,
            "dynamic_sampling/retained_groups": 8,
            "dynamic_sampling/discarded_surplus_groups": 2,
            "dynamic_sampling/filled_groups": 0,
            "dynamic_sampling/retention_rate": 10 / 24,
            "dynamic_sampling/generated_completions": 192,
            "dynamic_sampling/screened_prompts": 30,  # screening: 30 probed, 10 completed
            "dynamic_sampling/completed_prompts": 10,
            "dynamic_sampling/dropped_prompts": 20,
            "dynamic_sampling/completions_per_informative_group": 19.2,
            "dynamic_sampling/all_max_groups": 6,
            "dynamic_sampling/all_min_groups": 8,
            "groups/frac_all_max": 0.25,
            "groups/frac_all_min": 0.35,
            "groups/frac_mixed": 0.4,
            "groups/reward_std_mean": 0.3,
            "groups/reward_std_p10": 0.0,
            "groups/reward_std_p50": 0.35,
            "groups/reward_std_p90": 0.5,
            "groups/pass@1": 0.3 + 0.5 * progress,
            "groups/pass@k": 0.6 + 0.3 * progress,
            "length/truncated_frac": 0.05,
            "length/overlong_penalty_mean": -0.1,
            "length/in_buffer_frac": 0.15,
            "length/task_accuracy": 0.3 + 0.5 * progress,
            "length/shaped_reward_mean": 0.2 + 0.5 * progress,
            "cost/generated_tokens_per_retained_group": 9000.0,
            "cost/useful_token_frac": 0.6,
            "cost/padded_token_frac": 0.3,
            "cost/peak_memory_gb": 60.0,
            "time/generation_s": 6.0,
            "time/reward_s": 1.0,
            "time/update_s": 2.5,
            "time/other_s": 0.5,
            "time/generation_frac": 0.6,
            "time/reward_frac": 0.1,
            "time/update_frac": 0.25,
            "time/other_frac": 0.05,
        }
        if step == 5:
            entry["groups/pass@k"] = None  # TRL's log() writes None for a metric that was NaN all window
        history.append(entry)
    history.append({"step": steps, "epoch": 1.0, "train_runtime": 120.0, "train_loss": 0.005, "total_flos": 0.0})
    history.append({"step": steps, "eval_reward": 0.5, "eval_loss": 0.1})
    return history


def _write_state(directory: Path, history) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "trainer_state.json").write_text(json.dumps({"global_step": 12, "log_history": history}))
    return directory


def test_synthetic_dapo_run_draws_every_panel(tmp_path):
    run = _write_state(tmp_path / "dapo", _synthetic_history())
    report = build_report(run)
    assert report.panels == ALL_TITLES
    assert _panels_line(report.summary) == ALL_TITLES
    _check_png(run / "report.png", len(ALL_TITLES))
    assert "steps 1..12" in report.summary and "12 logged entries" in report.summary  # summary/eval rows left out
    assert "no warnings" in report.summary


def test_panels_follow_the_logged_keys(tmp_path):
    history = [
        {k: v for k, v in e.items() if not k.startswith(("dynamic_sampling/", "kl"))} for e in _synthetic_history()
    ]
    report = build_report(_write_state(tmp_path, history))
    assert report.panels == [
        t for t in ALL_TITLES if not t.startswith("Dynamic sampling") and t != "KL to the reference"
    ]


def test_health_checks_warn_in_plain_language(tmp_path):
    history = _synthetic_history()
    for entry in history[-3:]:
        entry.update({"groups/frac_all_min": 0.8, "completions/clipped_ratio": 0.5, "entropy": 0.1})
    history[3]["grad_norm"] = float("nan")
    report = build_report(_write_state(tmp_path, history))
    text = "\n".join(report.warnings)
    assert "too hard" in text
    assert "max_completion_length" in text
    assert "entropy fell" in text
    assert "grad_norm is not finite at step 4" in text
    assert "too easy" not in text
    assert "! groups/frac_all_min = 0.8" in report.summary


def test_truncation_is_one_warning_and_a_flat_entropy_has_plain_tick_labels(tmp_path):
    from trl_dapo_ext.cli.report.draw import build_figure
    from trl_dapo_ext.cli.report.panels import panels_for

    history = _synthetic_history()
    for index, entry in enumerate(history):
        entry.update({"completions/clipped_ratio": 0.5, "length/truncated_frac": 0.5, "entropy": 4.596 + 1e-6 * index})
    report = build_report(_write_state(tmp_path, history))
    assert sum("max_completion_length" in w for w in report.warnings) == 1
    assert report.summary_path.read_text().endswith("\n")
    figure = build_figure(history, [p for p in panels_for(history) if "ntropy" in p.title], None, "t")
    figure.canvas.draw()
    for ax in figure.axes:
        assert ax.yaxis.get_offset_text().get_text() == "", ax.get_title()


def test_unreadable_parquet_is_skipped_with_a_warning(tmp_path):
    run = _write_state(tmp_path, _synthetic_history())
    (run / "completions").mkdir()
    (run / "completions" / "completions_00001.parquet").write_text("not parquet")
    report = build_report(run)
    assert COMPLETIONS_PANEL not in report.panels
    assert any("completions_00001.parquet" in w for w in report.warnings)


# ------------------------------------------------------------------------------------------------------ garbage


def _garbage_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    cases = {"missing dir": (tmp_path / "nope", "does not exist")}
    (tmp_path / "file").write_text("x")
    cases["a file"] = (tmp_path / "file", "not a directory")
    (tmp_path / "empty").mkdir()
    cases["no state"] = (tmp_path / "empty", "save_state")
    for name, content, message in [
        ("bad-json", "{not json", "not valid JSON"),
        ("not-a-state", "[1, 2]", "no log_history"),
        ("no-history", json.dumps({"global_step": 0, "log_history": []}), "no training metrics"),
        ("only-eval", json.dumps({"log_history": [{"step": 1, "eval_loss": 0.3}]}), "no training metrics"),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(content)
        cases[name] = (tmp_path / name, message)
    return cases


def test_garbage_fails_with_one_line(tmp_path, capsys):
    for name, (path, message) in _garbage_cases(tmp_path).items():
        assert main(["report", str(path)]) == 2, name
        captured = capsys.readouterr()
        assert captured.out == "", name
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("trl-dapo report: error: "), (name, captured.err)
        assert message in lines[0], (name, lines[0])


def test_garbage_exit_code_from_the_console_entry(tmp_path):
    path, message = _garbage_cases(tmp_path)["bad-json"]
    result = _run_cli("report", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_unwritable_output_fails_cleanly(tmp_path, capsys):
    run = _write_state(tmp_path / "run", _synthetic_history())
    (tmp_path / "blocker").write_text("a file where a folder should be")
    assert main(["report", str(run), "--out", str(tmp_path / "blocker" / "r.png")]) == 2
    assert "cannot write the report" in capsys.readouterr().err


def test_out_must_be_a_png(tmp_path, capsys):
    run = _write_state(tmp_path / "run", _synthetic_history())
    assert main(["report", str(run), "--out", str(tmp_path / "report.txt")]) == 2
    assert ".png" in capsys.readouterr().err


def test_a_metric_that_is_never_finite_draws_no_panel(tmp_path):
    history = _synthetic_history()
    for entry in history:
        if "kl" in entry:
            entry["kl"] = float("nan")
    assert "KL to the reference" not in build_report(_write_state(tmp_path, history)).panels


def test_cli_usage_errors():
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["report"])  # OUTPUT_DIR missing
    assert exit_info.value.code == 2


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from trl_dapo_ext.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('matplotlib', 'pandas', 'torch', 'trl', 'trl_dapo_ext.cli.report') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "report" in result.stdout and result.stdout.strip().endswith("[]")


def _env() -> dict[str, str]:
    # The subprocess must import this checkout (tests may run with the package on PYTHONPATH, not installed).
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, path) if p)}


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trl_dapo_ext.cli.main", *args], capture_output=True, text=True, env=_env(), timeout=300
    )


def test_package_exports_resolve_lazily():
    import trl_dapo_ext

    assert sorted(trl_dapo_ext.__all__) == sorted(trl_dapo_ext._EXPORTS)
    assert trl_dapo_ext.GRPOTrainer is trl_dapo_ext.DAPOTrainer
    with pytest.raises(AttributeError):
        trl_dapo_ext.not_a_name  # noqa: B018
