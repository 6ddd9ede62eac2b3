"""`trl-dapo estimate`: the worked numbers of docs/preflight.md, the formulas on the recipes, bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trl_dapo_ext.cli import estimate as estimate_cli
from trl_dapo_ext.preflight.memory import (
    ADAMW_MIXED_BYTES,
    GIB,
    PUBLISHED,
    ModelShape,
    Recipe,
    estimate,
    kv_bytes_per_position,
    kv_cache_bytes,
    tokens_per_step,
    zero_bytes_per_process,
    zero_shards,
)

RECIPES = Path(__file__).resolve().parents[1] / "trl_dapo_ext" / "recipes"
KIB = 2**10

# docs/preflight.md's worked example: 32 layers, 8 KV heads of dimension 128, bf16 (a Llama-3-8B-like shape).
SEED_CONFIG = dict(
    num_hidden_layers=32,
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128_256,
    tie_word_embeddings=False,
)


def test_kv_cache_worked_numbers_of_the_seeds():
    per_position = kv_bytes_per_position(layers=32, kv_heads=8, head_dim=128, bytes_per_value=2)
    assert per_position == 131_072 == 128 * KIB
    assert ModelShape.from_config(SEED_CONFIG).head_dim == 128
    assert kv_cache_bytes(per_position, sequences=1, prompt=1024, completion=7168) == 1 * GIB  # 8,192 positions
    assert kv_cache_bytes(per_position, sequences=8, prompt=1024, completion=7168) == 8 * GIB  # 8 concurrent answers
    assert kv_cache_bytes(per_position, sequences=64, prompt=1024, completion=7168) == 64 * GIB
    shared = kv_cache_bytes(per_position, sequences=8, prompt=1024, completion=7168, share_prompt=True)
    assert shared == 7.125 * GIB  # 0.125 GiB of shared prompt + 8 x 0.875 GiB
    assert kv_cache_bytes(per_position, 8, 1024, 7168) - shared == 0.875 * GIB  # the saving, in that active batch


def test_mixed_precision_adamw_is_16_bytes_per_parameter():
    assert ADAMW_MIXED_BYTES == 16
    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-7B"])
    result = estimate(shape, Recipe(use_peft=False, beta=0.0))
    state = (result.parts["weights"] + result.parts["optimizer and gradients"]) * GIB
    assert state / shape.parameters() == pytest.approx(16.0)
    assert state / 1e9 == pytest.approx(16 * 7.6155, rel=1e-3)  # docs/preflight.md's "~112 GB at 7B" (7.6B here)
    with_ref = estimate(shape, Recipe(use_peft=False, beta=0.04))
    assert with_ref.parts["reference model"] * GIB == pytest.approx(2 * shape.parameters())  # +2 bytes/parameter
    sharded = estimate(shape, Recipe(use_peft=False, num_processes=4, zero_stage=2))
    assert sharded.parts["optimizer and gradients"] == pytest.approx(result.parts["optimizer and gradients"] / 4)


def test_zero_stages_divide_what_each_process_holds():
    # The ZeRO paper's Figure 1 (Rajbhandari et al. 2020): 7.5B parameters, mixed-precision Adam (K = 12), 64 GPUs.
    per_stage = [sum(zero_bytes_per_process(7.5e9, stage, 64).values()) / 1e9 for stage in range(4)]
    assert per_stage == pytest.approx([120, 31.40625, 16.640625, 1.875])  # 16, 4 + 12/64, 2 + 14/64, 16/64 x 7.5
    assert zero_shards(2, 3) == (1, 3, 3)
    with pytest.raises(ValueError, match="ZeRO stage"):
        zero_shards(4, 2)
    # recipes/multi_gpu_zero2_vllm_server.yaml's model on 3 training processes (1,543,656,960 parameters):
    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-1.5B-Instruct"])
    params = shape.parameters()
    zero2 = estimate(shape, Recipe(use_peft=False, num_processes=3, zero_stage=2))
    assert zero2.parts["weights"] * GIB == 2 * params  # 2.88 GiB, replicated
    assert zero2.parts["optimizer and gradients"] * GIB == pytest.approx(14 * params / 3)  # 6.71 GiB, not 20.13
    zero3 = estimate(shape, Recipe(use_peft=False, num_processes=3, zero_stage=3))
    assert zero3.parts["weights"] * GIB == pytest.approx(2 * params / 3)  # 0.96 GiB at rest ...
    gathered = zero3.parts["ZeRO-3 gathered weights"] * GIB  # ... all of them while generating
    assert gathered == pytest.approx(2 * params * 2 / 3)
    unsharded = estimate(shape, Recipe(use_peft=False, num_processes=3, zero_stage=3, ds3_gather_for_generation=False))
    assert "ZeRO-3 gathered weights" not in unsharded.parts
    # LoRA: ZeRO-3 divides the frozen base weights too, and the adapter's 16 bytes/parameter like any trained ones.
    lora0 = estimate(shape, Recipe(use_peft=True, num_processes=4, zero_stage=0))
    lora3 = estimate(shape, Recipe(use_peft=True, num_processes=4, zero_stage=3))
    assert lora3.parts["weights"] == pytest.approx(lora0.parts["weights"] / 4)
    assert lora3.parts["LoRA and optimizer"] == pytest.approx(lora0.parts["LoRA and optimizer"] / 4)


def test_cli_gives_the_memory_per_process_under_zero(capsys):
    argv = ["--config", str(RECIPES / "multi_gpu_zero2_vllm_server.yaml"), "--num-processes", "3"]
    assert estimate_cli.main([*argv, "--zero-stage", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 training processes, ZeRO-2" in out and "| optimizer and gradients | 6.71 |" in out  # docs/memory.md
    assert "| weights | 2.88 |" in out and "| total (x1.15 fragmentation + 0.8 GiB CUDA context) | 17.97 |" in out
    assert estimate_cli.main([*argv, "--zero-stage", "3"]) == 0
    out = capsys.readouterr().out
    assert "| weights | 0.96 |" in out and "| ZeRO-3 gathered weights | 1.92 |" in out


def test_tokens_per_step_and_shapes():
    assert tokens_per_step(64 * 8, 1000) == 512_000  # docs/preflight.md's example
    assert round(ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B"]).parameters() / 1e6) == 494
    assert round(ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-1.5B"]).parameters() / 1e6) == 1544
    shape = ModelShape.from_config({"text_config": SEED_CONFIG})  # a multimodal config's text part
    assert shape.lora_parameters(16, ["q_proj", "v_proj"]) == 32 * 16 * ((4096 + 4096) + (4096 + 1024))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelShape.from_config({"hidden_size": 8})


def test_recipes_reproduce_the_published_memory_table():
    """docs/memory.md's table (computed before by a script of its own) from the same formulas."""
    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B"])
    common = dict(use_peft=True, per_device_train_batch_size=16, gradient_accumulation_steps=4, prompt_length=200)
    common.update(max_completion_length=512, dynamic_sampling=True)
    transformers = estimate(shape, Recipe.from_dict({**common, "dynamic_sampling_fixed_budget": True}))
    parts = {k: round(v, 2) for k, v in transformers.parts.items()}
    assert parts == {"weights": 0.92, "LoRA and optimizer": 0.13, "activations": 1.93, "KV cache": 0.52}
    assert round(transformers.trainer_gib, 2) == 4.83
    # Refill's rounds reach dynamic_sampling_max_oversample times the batch (2 here): twice the KV cache.
    refill = estimate(shape, Recipe.from_dict({**common, "dynamic_sampling_max_oversample": 2.0}))
    assert round(refill.parts["KV cache"], 2) == 1.04 and round(refill.trainer_gib, 2) == 5.43
    vllm = estimate(shape, Recipe.from_dict({**common, "use_vllm": True}))
    assert round(vllm.trainer_gib, 2) == 4.23 and vllm.verdicts["L4 24GB"] == "fits (~11)"
    assert vllm.verdicts["T4 16GB"].startswith("no (no bf16")


def test_profile_lengths_and_retention_drive_the_cost():
    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B"])
    recipe = Recipe(per_device_train_batch_size=16, gradient_accumulation_steps=4, max_completion_length=512)
    recipe.dynamic_sampling = True
    worst = estimate(shape, recipe)
    profiled = estimate(shape, recipe, mean_completion_length=200.0, retention=0.5)
    assert worst.tokens_per_step == 64 * 512
    assert profiled.tokens_per_step == 64 / 0.5 * 200.0
    assert profiled.parts == worst.parts  # memory is sized for max_completion_length either way


def test_cli_on_every_recipe_and_with_a_profile(tmp_path, capsys):
    from transformers import LlamaConfig

    from trl_dapo_ext.cli.demo import DemoSettings, build_tokenizer_and_model

    # recipes/tiny_cpu.yaml trains the model `trl-dapo demo` writes: estimate it from that model's own config.
    _, demo_model = build_tokenizer_and_model(DemoSettings.model_size, DemoSettings.seed)
    demo_model.config.to_json_file(str(tmp_path / "config.json"))
    # recipes/smollm2_cpu.yaml trains the folder `make smollm2` links: SmolLM2-135M-Instruct's published shape.
    smollm2 = tmp_path / "smollm2" / "config.json"
    smollm2.parent.mkdir()
    LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ).to_json_file(str(smollm2))
    local = {"tiny_cpu.yaml": tmp_path / "config.json", "smollm2_cpu.yaml": smollm2}
    for recipe in sorted(RECIPES.glob("*.yaml")):
        model = ["--model", str(local[recipe.name])] if recipe.name in local else []
        assert estimate_cli.main(["--config", str(recipe), *model]) == 0, recipe
        out = capsys.readouterr().out
        assert "| H200 141GB |" in out and "KV cache" in out and "tokens" in out
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "summary.json").write_text(
        json.dumps(dict(mean_completion_length=100.0, mean_prompt_length=50.0, expected_retention=0.25))
    )
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SEED_CONFIG))
    report = tmp_path / "estimate.json"
    argv = ["--config", str(RECIPES / "gsm8k_lora_1gpu.yaml"), "--model", str(config), "--profile", str(profile)]
    assert estimate_cli.main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "128.0 KiB per position" in out and "50 + 512 tokens" in out
    data = json.loads(report.read_text())
    assert data["kv_bytes_per_position"] == 131072
    assert data["tokens_per_step"] == 64 * 100.0  # the recipe's fixed budget: the batch, whatever the retention
    # The same recipe with DAPO's refill: the batch over the profile's retention.
    refill = tmp_path / "refill.yaml"
    screening = ("dynamic_sampling_screen_generations", "dynamic_sampling_fixed_budget", "dynamic_sampling_pipeline")
    lines = (RECIPES / "gsm8k_lora_1gpu.yaml").read_text().splitlines()
    refill.write_text("\n".join(line for line in lines if not line.startswith(screening)))
    assert estimate_cli.main(["--config", str(refill), *argv[2:], "--json", str(report)]) == 0
    assert json.loads(report.read_text())["tokens_per_step"] == 64 / 0.25 * 100.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "/no/such.yaml"], "does not exist"),
        (["--config", "{bad_yaml}"], "must be a mapping"),
        (["--config", "{recipe}", "--model", "/no/such/model"], "does not exist"),
        (["--config", "{recipe}", "--model", "{bad_config}"], "num_hidden_layers"),
        (["--config", "{recipe}", "--model", "some-org/unknown-model"], "cannot read the config"),
        (["--config", "{recipe}", "--profile", "/no/such/profile"], "no profile summary"),
        (["--config", "{recipe}", "--num-processes", "0"], "--num-processes must be >= 1"),
        (["--config", "{zero_batch}"], "per_device_train_batch_size must be >= 1"),
    ],
)
def test_cli_bad_input(tmp_path, capsys, argv, message):
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    (tmp_path / "zero.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nper_device_train_batch_size: 0\n"
    )
    names = dict(
        bad_yaml=tmp_path / "bad.yaml",
        recipe=RECIPES / "gsm8k_lora_1gpu.yaml",
        bad_config=tmp_path / "config.json",
        zero_batch=tmp_path / "zero.yaml",
    )
    argv = [a.format(**names) if a.startswith("{") else a for a in argv]
    assert estimate_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("trl-dapo estimate: error:") and message in err


def test_recipe_model_folder_that_does_not_exist_says_which_command_makes_it(tmp_path, monkeypatch, capsys):
    """recipes/tiny_cpu.yaml before `trl-dapo demo` wrote runs/demo/final: the message `trl-dapo train` gives."""
    monkeypatch.chdir(tmp_path)  # no runs/demo/final here
    assert estimate_cli.main(["--config", str(RECIPES / "tiny_cpu.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("trl-dapo estimate: error: model_name_or_path runs/demo/final does not exist")
    assert "run trl-dapo demo --quick first" in err


def test_a_fixed_budget_generates_the_batch_whatever_the_retention():
    """At GRPO's budget (`dynamic_sampling_fixed_budget`, the recipes' mode) a step generates at most the batch, in
    calls no larger than plain GRPO's: the tokens and the KV cache are dynamic sampling off's, not refill's."""
    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B"])
    sizes = dict(per_device_train_batch_size=16, gradient_accumulation_steps=4, max_completion_length=512)
    off = estimate(shape, Recipe.from_dict(sizes), mean_completion_length=200.0, retention=0.5)
    fixed = Recipe.from_dict({**sizes, "dynamic_sampling": True, "dynamic_sampling_fixed_budget": True})
    budget = estimate(shape, fixed, mean_completion_length=200.0, retention=0.5)
    refill = estimate(shape, Recipe.from_dict({**sizes, "dynamic_sampling": True}), 200.0, retention=0.5)
    assert budget.tokens_per_step == off.tokens_per_step == 64 * 200.0 < refill.tokens_per_step
    assert budget.parts == off.parts and refill.parts["KV cache"] == 4 * off.parts["KV cache"]
    assert any("GRPO's budget" in note for note in budget.notes)
