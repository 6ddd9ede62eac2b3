"""The recipes shipped inside the package: `trl-dapo recipes` lists, prints and copies them, and `--config NAME`
takes a shipped recipe by name in train, estimate and profile (tests/test_wheel.py runs one from an installed wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trl_dapo_ext import recipes
from trl_dapo_ext.cli import estimate as estimate_cli
from trl_dapo_ext.cli import main as cli_main
from trl_dapo_ext.cli import train as train_cli
from trl_dapo_ext.cli.profile import arguments as profile_arguments

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--use_cpu", "true", "--bf16", "false", "--fp16", "false", "--use_vllm", "false", "--load_in_4bit", "false"]


def test_one_copy_in_the_package_and_the_checkout_links_to_it():
    assert recipes.RECIPES_DIR == ROOT / "trl_dapo_ext" / "recipes"
    link = ROOT / "recipes"
    assert link.is_symlink() and link.resolve() == recipes.RECIPES_DIR  # benchmarks and old paths keep working
    assert {"tiny_cpu", "smollm2_cpu", "gsm8k_lora_1gpu"} <= set(recipes.names())
    assert recipes.names(accelerate=True) == ["accelerate/zero2", "accelerate/zero3"]
    assert set(recipes.names() + recipes.names(accelerate=True)) == set(recipes.DESCRIPTIONS)  # each one listed


def test_every_data_file_a_recipe_names_is_shipped_beside_it():
    for name in recipes.names():
        dataset = yaml.safe_load(recipes.recipe_path(name).read_text())["dataset_name"]
        if not dataset.startswith("openai/"):
            assert (recipes.RECIPES_DIR / dataset).is_file(), (name, dataset)


def test_recipes_lists_names_and_the_folder(capsys):
    assert cli_main.main(["recipes"]) == 0
    out = capsys.readouterr().out
    for name in recipes.names() + recipes.names(accelerate=True):
        assert f"  {name} " in out
    assert "trl-dapo train --config NAME" in out and str(recipes.RECIPES_DIR) in out
    assert cli_main.main(["recipes", "path", "accelerate/zero2"]) == 0
    assert capsys.readouterr().out.strip() == str(recipes.RECIPES_DIR / "accelerate" / "zero2.yaml")


@pytest.mark.parametrize("argv", [["path", "tiny"], ["copy", "tiny"]])
def test_an_unknown_name_is_one_line_listing_the_names(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main.main(["recipes", *argv]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("trl-dapo recipes: error: unknown recipe 'tiny'")
    assert all(name in line for name in recipes.names() + recipes.names(accelerate=True))
    assert list(tmp_path.iterdir()) == []


def test_copy_writes_the_recipe_and_its_data_and_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main.main(["recipes", "copy", "tiny_cpu"]) == 0
    assert (tmp_path / "tiny_cpu.yaml").read_text() == recipes.recipe_path("tiny_cpu").read_text()
    assert (tmp_path / "data" / "addition.jsonl").is_file()
    assert "trl-dapo train --config tiny_cpu.yaml" in capsys.readouterr().out
    assert cli_main.main(["recipes", "copy", "tiny_cpu"]) == 0  # the same content again: nothing to lose
    (tmp_path / "tiny_cpu.yaml").write_text("max_steps: 1\n")
    assert cli_main.main(["recipes", "copy", "tiny_cpu"]) == 2
    assert "already exists and differs (--force overwrites)" in capsys.readouterr().err
    assert cli_main.main(["recipes", "copy", "tiny_cpu", "--force"]) == 0
    assert cli_main.main(["recipes", "copy", "smollm2_cpu", "mine/smol.yaml"]) == 0
    assert (tmp_path / "mine" / "smol.yaml").is_file()
    assert (tmp_path / "mine" / "data" / "word_problems.jsonl").is_file()
    assert cli_main.main(["recipes", "copy", "accelerate/zero3", "configs"]) == 0
    assert (tmp_path / "configs" / "zero3.yaml").is_file()


def test_train_takes_a_shipped_name_and_finds_its_data_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/ here
    script_args, training_args, _ = train_cli.parse_args(["--config", "tiny_cpu", *CPU])
    assert script_args.dataset_name == str(recipes.RECIPES_DIR / "data" / "addition.jsonl")
    assert training_args.max_steps == 20
    # A copy runs as it is, from another folder; a dataset_name given as a flag is taken as given.
    recipes.copy_recipe("tiny_cpu", tmp_path / "copy")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    script_args, _, _ = train_cli.parse_args(["--config", "../copy/tiny_cpu.yaml", *CPU])
    assert Path(script_args.dataset_name).resolve() == tmp_path / "copy" / "data" / "addition.jsonl"
    script_args, _, _ = train_cli.parse_args(["--config", "tiny_cpu", "--dataset_name", "data/x.jsonl", *CPU])
    assert script_args.dataset_name == "data/x.jsonl"
    # A file of the working directory wins over the shipped recipe's data.
    (tmp_path / "elsewhere" / "data").mkdir()
    (tmp_path / "elsewhere" / "data" / "addition.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    script_args, _, _ = train_cli.parse_args(["--config", "tiny_cpu", *CPU])
    assert script_args.dataset_name == "data/addition.jsonl"


def test_an_unknown_config_name_is_one_line_with_the_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main.main(["train", "--config", "tiny"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("trl-dapo train: error: recipe tiny does not exist and names no shipped recipe;")
    assert "tiny_cpu, smollm2_cpu" in line and "trl-dapo recipes lists them" in line
    # The old checkout path from outside a checkout: the name it meant.
    assert cli_main.main(["train", "--config", "recipes/tiny_cpu.yaml"]) == 2
    assert "(did you mean --config tiny_cpu?)" in capsys.readouterr().err
    assert estimate_cli.main(["--config", "tiny"]) == 2
    assert "trl-dapo estimate: error: recipe tiny does not exist" in capsys.readouterr().err


def test_estimate_and_profile_take_a_shipped_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert estimate_cli.main(["--config", "gsm8k_lora_1gpu"]) == 0
    assert "recipe gsm8k_lora_1gpu:" in capsys.readouterr().out
    options = profile_arguments.parse_options(["--config", "smollm2_cpu"], "trl-dapo profile")
    assert options.dataset == str(recipes.RECIPES_DIR / "data" / "word_problems.jsonl")
    assert options.model == "runs/smollm2" and options.prompt_column == "question"
