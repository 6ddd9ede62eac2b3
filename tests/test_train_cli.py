"""`trl-dapo train`: every recipe parses into our dataclasses, bad input fails in one line, and a 2-step CPU run
with a tiny local model (given by path) and a local dataset writes the adapter, the trainer state and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from datasets import Dataset

from trl_dapo_ext.cli import main as cli_main
from trl_dapo_ext.cli import train as train_cli
from trl_dapo_ext.preflight.recommend import PIPELINED_SCREENING
from trl_dapo_ext.tiny import save_tiny_model

RECIPES = sorted((Path(__file__).resolve().parents[1] / "trl_dapo_ext" / "recipes").glob("*.yaml"))
# This CI machine has no GPU: TrainingArguments refuses bf16/fp16 without one, so parsing a GPU recipe here needs
# these overrides (the override mechanism itself: flags win over the YAML).
CPU_OVERRIDES = ["--use_cpu", "true", "--bf16", "false", "--fp16", "false"]
# Keys TrainingArguments normalises in __post_init__ (checked separately or not comparable to the YAML literal).
NORMALISED = {"report_to", "bf16", "fp16"}


def _plain(value):
    value = getattr(value, "value", value)  # enums such as lr_scheduler_type
    if isinstance(value, list) and len(value) == 1:
        return value[0]  # ModelConfig turns a one-element lora_target_modules list into the string
    return value


def test_recipes_exist():
    names = {path.name for path in RECIPES}
    assert {
        "gsm8k_lora_1gpu.yaml",
        "gsm8k_qlora_t4.yaml",
        "multi_gpu_zero2_vllm_server.yaml",
        "tiny_cpu.yaml",
    } <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.stem)
def test_recipe_parses_into_our_dataclasses(recipe):
    script_args, training_args, model_args = train_cli.parse_args(["--config", str(recipe), *CPU_OVERRIDES])
    assert isinstance(script_args, train_cli.TrainScriptArguments)
    assert type(training_args).__name__ == "DAPOConfig"
    values = yaml.safe_load(recipe.read_text())
    for key, expected in values.items():
        if key in NORMALISED:
            continue
        owners = [obj for obj in (script_args, training_args, model_args) if hasattr(obj, key)]
        assert owners, f"{recipe.name}: {key} is no field of ours"
        if key == "dataset_name" and (recipe.parent / expected).is_file():  # a data file shipped beside the recipe
            expected = str(recipe.parent / expected)
        assert _plain(getattr(owners[0], key)) == _plain(expected), (recipe.name, key)
    # Every recipe names rewards the registry knows, uses the DAPO features, and picks an existing model.
    assert set(script_args.reward_funcs) <= set(train_cli.REWARD_FUNCS)
    assert training_args.dynamic_sampling and training_args.diagnostics
    assert training_args.epsilon_high == 0.28 and training_args.loss_type == "dapo"
    if recipe.stem == "tiny_cpu":  # the demo's model (6-token completions: no room for an overlong buffer)
        assert model_args.model_name_or_path == "runs/demo/final" and training_args.use_cpu
        return
    assert training_args.overlong_buffer_length is not None
    if recipe.stem == "smollm2_cpu":  # the real-model lane's model, linked by `python -m trl_dapo_ext.models --link`
        assert model_args.model_name_or_path == "runs/smollm2" and training_args.use_cpu and model_args.use_peft
        return
    assert model_args.model_name_or_path.startswith("Qwen/Qwen2.5-")


def test_recipe_specifics():
    by_name = {path.stem: yaml.safe_load(path.read_text()) for path in RECIPES}
    lora = by_name["gsm8k_lora_1gpu"]
    assert lora["use_peft"] and lora["use_vllm"] and lora["vllm_mode"] == "colocate" and lora["bf16"]
    t4 = by_name["gsm8k_qlora_t4"]
    assert t4["load_in_4bit"] and t4["fp16"] and not t4["bf16"] and not t4["use_vllm"] and t4["dtype"] == "float16"
    multi = by_name["multi_gpu_zero2_vllm_server"]
    assert multi["vllm_mode"] == "server"
    text = (RECIPES[0].parent / "multi_gpu_zero2_vllm_server.yaml").read_text()
    assert (
        "trl vllm-serve" in text
        and 'accelerate launch --config_file "$(trl-dapo recipes path accelerate/zero2)"' in text
    )
    zero2 = yaml.safe_load((RECIPES[0].parent / "accelerate" / "zero2.yaml").read_text())
    assert zero2["distributed_type"] == "DEEPSPEED" and zero2["deepspeed_config"]["zero_stage"] == 2


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.stem)
def test_recipe_chooses_groups_as_the_study_supports(recipe):
    """Every recipe runs the study's primary mode (pipelined screening at GRPO's budget, `recommend.PIPELINED_SCREENING`)
    with half the group as probes, not DAPO's refill, which the study measured behind it (docs/choosing.md)."""
    _, training_args, _ = train_cli.parse_args(["--config", str(recipe), *CPU_OVERRIDES])
    mode = {**PIPELINED_SCREENING, "dynamic_sampling_screen_generations": training_args.num_generations // 2}
    assert {key: getattr(training_args, key) for key in mode} == mode
    text = recipe.read_text()
    assert "docs/choosing.md#the-shipped-recipes" in text and "dynamic_sampling_on_exhausted: fill" in text


def test_flags_override_the_recipe():
    recipe = RECIPES[0]
    _, training_args, model_args = train_cli.parse_args(
        ["--config", str(recipe), *CPU_OVERRIDES, "--epsilon_high", "0.3", "--lora_r", "4", "--use_vllm", "false"]
    )
    assert training_args.epsilon_high == 0.3 and model_args.lora_r == 4 and training_args.use_vllm is False


def test_misspelt_recipe_key_is_an_error(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("output_dir: out\ndynamic_samplng: true\n")
    assert train_cli.main(["--config", str(recipe), *CPU_OVERRIDES]) == 2
    assert "dynamic_samplng" in capsys.readouterr().err


def test_unknown_reward_name_lists_the_choices(capsys):
    with pytest.raises(train_cli.TrainError, match="unknown reward function 'math_rewrad'") as error:
        train_cli.resolve_reward_funcs(["math_rewrad"])
    for name in train_cli.REWARD_FUNCS:
        assert name in str(error.value)
    # Through the command: exit status 2 and one line on stderr, before any model is loaded.
    argv = [
        "--model_name_or_path",
        "/nonexistent",
        "--dataset_name",
        "x.jsonl",
        "--reward_funcs",
        "nope",
        "--output_dir",
        "o",
    ]
    assert train_cli.main([*argv, *CPU_OVERRIDES]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-dapo train: error: unknown reward function 'nope'") and "math_reward" in err


def test_a_users_module_named_reward_funcs_is_a_one_line_error(tmp_path):
    """A user's reward_funcs.py beside the recipe shadows the package's reward library: one line naming the clash
    and the fix, from a fresh process as a user runs it (it was a traceback from deep inside the library)."""
    import os
    import subprocess
    import sys

    (tmp_path / "reward_funcs.py").write_text(
        "def my_reward(completions, **kwargs):\n    return [0.0] * len(completions)\n"
    )
    (tmp_path / "data.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    argv = ["--model_name_or_path", str(tmp_path), "--dataset_name", "data.jsonl", "--output_dir", "o"]
    command = [
        sys.executable,
        "-m",
        "trl_dapo_ext.cli.main",
        "train",
        *argv,
        *CPU_OVERRIDES,
        "--reward_funcs",
        "reward_funcs.my_reward",
    ]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert (
        "reward_funcs.py" in result.stderr
        and "rename yours" in result.stderr
        and "my_rewards.my_reward" in result.stderr
    )


def test_reward_registry_resolves_every_name():
    funcs = train_cli.resolve_reward_funcs(list(train_cli.REWARD_FUNCS))
    assert [f.__name__ for f in funcs] == list(train_cli.REWARD_FUNCS)
    (dotted,) = train_cli.resolve_reward_funcs(["reward_funcs.math_reward"])
    assert dotted.__name__ == "math_reward"


def test_four_bit_without_bitsandbytes_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(train_cli.model, "_bitsandbytes_available", lambda: False)
    _, training_args, model_args = train_cli.parse_args(
        ["--config", str(RECIPES[0].parent / "gsm8k_qlora_t4.yaml"), *CPU_OVERRIDES]
    )
    with pytest.raises(train_cli.TrainError, match="bitsandbytes"):
        train_cli.model_loading_kwargs(model_args, training_args)


def test_dataset_loading_and_column_mapping(tmp_path):
    rows = [{"question": f"{i}+1?", "solution": f"#### {i + 1}", "test_list": ["assert f(1) == 2"]} for i in range(4)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = train_cli.TrainScriptArguments(
        dataset_name=str(data), prompt_column="question", answer_column="solution", system_prompt="Be brief."
    )
    dataset = train_cli.load_train_dataset(args)
    assert dataset[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "0+1?"},
    ]
    assert dataset[0]["answer"] == "#### 1"

    # A save_to_disk folder, a template over several columns, plain-text prompts, a tests column.
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    args = train_cli.TrainScriptArguments(
        dataset_name=str(tmp_path / "saved"),
        prompt_template="{question}\nTests:\n{test_list}",
        tests_column="test_list",
        use_chat_template=False,
        max_train_samples=2,
    )
    dataset = train_cli.load_train_dataset(args)
    assert len(dataset) == 2
    assert dataset[1]["prompt"] == "1+1?\nTests:\nassert f(1) == 2" and dataset[1]["tests"] == ["assert f(1) == 2"]

    with pytest.raises(train_cli.TrainError, match="prompt_column 'prompt' is not a dataset column"):
        train_cli.load_train_dataset(train_cli.TrainScriptArguments(dataset_name=str(data)))
    with pytest.raises(train_cli.TrainError, match="does not exist"):
        train_cli.load_train_dataset(train_cli.TrainScriptArguments(dataset_name="./missing.jsonl"))


def test_train_is_a_subcommand():
    assert cli_main.COMMANDS["train"][0] == "trl_dapo_ext.cli.train"


@pytest.fixture
def tiny_model_dir(tmp_path):
    # Saved with its chat template: the recipe's system prompt makes chat prompts.
    return save_tiny_model(tmp_path / "tiny-model", max_positions=512)


@pytest.mark.trainer
def test_two_step_cpu_run_on_top_of_a_recipe(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "gsm8k_like.jsonl"
    rows = [{"question": f"What is {i} + 2?", "answer": f"{i} + 2 = {i + 2}\n#### {i + 2}"} for i in range(16)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "run"
    # The GPU recipe, with the model, data, backend and sizes overridden by flags (the documented mechanism).
    argv = [
        "train", "--config", str(RECIPES[0].parent / "gsm8k_lora_1gpu.yaml"),
        "--model_name_or_path", str(tiny_model_dir), "--dataset_name", str(data), "--dtype", "float32",
        *CPU_OVERRIDES, "--use_vllm", "false", "--gradient_checkpointing", "false",
        "--max_steps", "2", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
        "--num_generations", "4", "--dynamic_sampling_screen_generations", "2", "--max_completion_length", "12", "--overlong_buffer_length", "4",
        "--save_strategy", "no", "--log_completions", "false", "--disable_tqdm", "true",
        "--output_dir", str(output),
    ]  # fmt: skip
    assert cli_main.main(argv) == 0

    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    screened = [entry for entry in state["log_history"] if "dynamic_sampling/screened_prompts" in entry]
    assert screened  # the recipe's screening
    assert (output / "adapter_model.safetensors").is_file()  # LoRA from the recipe: only the adapter is saved
    summary = json.loads((output / "train_summary.json").read_text())
    assert summary["steps"] == 2 and summary["device"] == "cpu" and summary["steps_per_s"] > 0
    assert summary["threads"]["threads"] >= 1  # the thread count that ran is recorded
    assert (output / "report.png").is_file()
    assert '"steps": 2' in capsys.readouterr().out
