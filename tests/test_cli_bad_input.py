"""Bad input to every command is one line on stderr and exit status 2, at once: an empty or malformed data file,
a missing local file or model folder (never looked up on the Hub), a misspelt recipe key, a negative batch size,
invalid YAML; a reward that raises is one line too (status 1 in `train`), with `--debug` for the traceback."""

from __future__ import annotations

import json

import pytest

from trl_dapo_ext.cli import check_reward, estimate, profile
from trl_dapo_ext.cli import train as train_cli
from trl_dapo_ext.tiny import save_tiny_model

CPU = ["--use_cpu", "true", "--bf16", "false", "--use_vllm", "false", "--gradient_checkpointing", "false"]
TRAIN = [*CPU, "--max_completion_length", "8", "--use_chat_template", "false", "--report_to", "none"]
RAISING_REWARD = 'def boom(completions, **kwargs):\n    raise ValueError("kaboom")\n'


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A tiny model, an empty, a malformed and a good JSON-lines file in the working directory; the Hub refused."""

    def no_hub(*args, **kwargs):
        raise AssertionError(f"looked up on the Hub: {args}")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("datasets.load_dataset", _local_only(no_hub))
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": oops}\n')
    (tmp_path / "good.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(8))
    )
    (tmp_path / "raising.py").write_text(RAISING_REWARD)
    save_tiny_model(tmp_path / "tiny", max_positions=64)
    return tmp_path


def _local_only(no_hub):
    import datasets

    real = datasets.load_dataset

    def load_dataset(path, *args, **kwargs):
        return real(path, *args, **kwargs) if path in ("json", "csv", "parquet") else no_hub(path)

    return load_dataset


def _one_error(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    marker = f"trl-dapo {prog}: error:"
    (line,) = [line[line.index(marker) :] for line in err.splitlines() if marker in line]  # after any progress bar
    return line


DATA_CASES = [
    ("empty.jsonl", "empty.jsonl is empty"),
    ("bad.jsonl", "bad.jsonl line 2: not valid JSON"),
    ("nofile.jsonl", "dataset_name nofile.jsonl does not exist"),
]


@pytest.mark.parametrize(("data", "says"), DATA_CASES)
def test_check_reward_bad_data_is_one_line(files, capsys, data, says):
    assert check_reward.main(["math_reward", "--dataset", data]) == 2
    assert says in _one_error(capsys, "check-reward")


@pytest.mark.parametrize(("data", "says"), DATA_CASES)
def test_profile_bad_data_is_one_line(files, capsys, data, says):
    assert profile.main(["--model", "tiny", "--dataset", data, "--use-chat-template", "false"]) == 2
    assert says in _one_error(capsys, "profile")


@pytest.mark.parametrize(("data", "says"), DATA_CASES)
def test_train_bad_data_is_one_line(files, capsys, data, says):
    assert train_cli.main(["--model_name_or_path", "tiny", "--dataset_name", data, *TRAIN]) == 2
    assert says in _one_error(capsys, "train")


def test_a_missing_model_folder_is_named_with_the_command_that_makes_it(files, capsys):
    assert profile.main(["--model", "./nomodel", "--dataset", "good.jsonl"]) == 2
    assert "--model ./nomodel does not exist" in _one_error(capsys, "profile")
    assert train_cli.main(["--model_name_or_path", "runs/demo/final", "--dataset_name", "good.jsonl", *TRAIN]) == 2
    assert "runs/demo/final does not exist (trl-dapo demo writes it" in _one_error(capsys, "train")


@pytest.mark.parametrize(
    ("recipe", "says"),
    [
        ("per_device_train_batch_size: -8\n", "per_device_train_batch_size must be a positive integer, got -8"),
        ("model_name_or_path: tiny\n  bad: [\n", "mapping values are not allowed here"),
    ],
)
def test_train_bad_recipe_values_are_one_line(files, capsys, recipe, says):
    (files / "recipe.yaml").write_text(recipe)
    assert train_cli.main(["--config", "recipe.yaml", *TRAIN]) == 2
    assert says in _one_error(capsys, "train")


def test_estimate_refuses_a_misspelt_key_and_counts_small_models_in_k(files, capsys):
    (files / "typo.yaml").write_text("model_name_or_path: tiny\nlearning_rat: 1.0e-5\n")
    assert estimate.main(["--config", "typo.yaml"]) == 2
    assert "learning_rat (did you mean learning_rate?)" in _one_error(capsys, "estimate")
    (files / "ok.yaml").write_text("model_name_or_path: tiny\n")
    assert estimate.main(["--config", "ok.yaml"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "0.000B" not in first and "K parameters" in first


def test_a_raising_reward_is_one_line_in_profile_and_train(files, capsys):
    argv = ["--model", "tiny", "--dataset", "good.jsonl", "--use-chat-template", "false", "--reward", "raising:boom"]
    assert profile.main([*argv, "--max-completion-length", "4", "--output-dir", "p"]) == 2
    assert "reward boom raised: ValueError: kaboom" in _one_error(capsys, "profile")
    train_argv = ["--model_name_or_path", "tiny", "--dataset_name", "good.jsonl", "--reward_funcs", "raising.boom"]
    train_argv += [*TRAIN, "--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    assert train_cli.main([*train_argv, "--output_dir", "o"]) == 1
    line = _one_error(capsys, "train")
    assert "reward function 'boom' raised" in line and "kaboom" in line and "--debug" in line
    assert train_cli.main([*train_argv, "--output_dir", "o", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err  # --debug: the chained traceback, then the same line


def test_profile_invalid_recipe_yaml_is_one_line(files, capsys):
    (files / "recipe.yaml").write_text("model_name_or_path: tiny\n  bad: [\n")
    assert profile.main(["--config", "recipe.yaml"]) == 2
    assert "recipe.yaml is not valid YAML" in _one_error(capsys, "profile")
