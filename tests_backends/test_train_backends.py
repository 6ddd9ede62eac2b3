"""`trl-dapo train` with the real backends on a CPU: a recipe that turns on vLLM colocate, and 4-bit QLoRA.

Both run the command's own entry point in this process (so the trainer it builds can be inspected) on a tiny model
saved to a directory, with a local .jsonl dataset, dynamic sampling forced into refill rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from backend_helpers import LOGP_DIFF, LOGP_TOLERANCE, RoundLog, kind_rows

from trl_dapo_ext import DAPOTrainer
from trl_dapo_ext.cli import main as cli_main

RECIPES = Path(__file__).resolve().parent / "recipes"


@pytest.fixture
def dataset_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in kind_rows()))
    return str(path)


@pytest.fixture
def trained(monkeypatch):
    """Records the trainer `trl-dapo train` builds (and its per-round logp differences) when it starts training."""
    seen = {}
    original = DAPOTrainer.train

    def train(self, *args, **kwargs):
        seen["trainer"], seen["log"] = self, RoundLog(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DAPOTrainer, "train", train)
    return seen


def _run(recipe: str, model_dir: str, dataset_file: str, output_dir: Path) -> dict:
    argv = ["train", "--config", str(RECIPES / recipe), "--model_name_or_path", model_dir]
    argv += ["--dataset_name", dataset_file, "--output_dir", str(output_dir)]
    assert cli_main.main(argv) == 0
    return json.loads((output_dir / "train_summary.json").read_text())


def test_train_command_with_a_vllm_colocate_recipe(model_dir, dataset_file, tmp_path, trained):
    summary = _run("tiny_vllm_colocate_cpu.yaml", model_dir, dataset_file, tmp_path / "run")
    assert summary["steps"] == 3
    trainer, log = trained["trainer"], trained["log"]
    assert trainer.use_vllm and trainer.vllm_mode == "colocate"
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    steps = [entry for entry in history if LOGP_DIFF in entry]
    assert len(steps) == 3 and all("dynamic_sampling/rounds" in entry for entry in steps)
    assert max(log.rounds) >= 2, f"no step needed a refill round: {log.rounds}"
    assert max(log.values) < LOGP_TOLERANCE, f"vLLM out of sync with the policy: per-round {log.steps}"


def test_train_command_qlora_4bit_on_cpu(model_dir, dataset_file, tmp_path, trained):
    import bitsandbytes as bnb
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    output = tmp_path / "qlora"
    summary = _run("tiny_qlora_cpu.yaml", model_dir, dataset_file, output)
    assert summary["steps"] == 3
    trainer = trained["trainer"]
    model = trainer.model
    assert any(isinstance(module, bnb.nn.Linear4bit) for module in model.modules()), "the base was not loaded in 4 bit"
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    rounds = [entry["dynamic_sampling/rounds"] for entry in history if "dynamic_sampling/rounds" in entry]
    assert len(rounds) == 3 and max(rounds) >= 2, rounds
    lora_b = {name: p.detach().clone() for name, p in model.named_parameters() if "lora_B" in name}
    assert lora_b and max(p.abs().max().item() for p in lora_b.values()) > 0  # LoRA B starts at zero: it learned

    # The saved adapter reloads onto a freshly quantized base: the same adapter tensors, the trained model's outputs.
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    trained_adapter = get_peft_model_state_dict(model)
    saved = load_file(str(output / "adapter_model.safetensors"))
    assert saved.keys() == trained_adapter.keys()
    assert all(torch.equal(saved[name], trained_adapter[name].cpu()) for name in saved)
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
    base = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=quantization, device_map="cpu")
    reloaded = PeftModel.from_pretrained(base, str(output)).eval()
    inputs = trainer.processing_class(["12+5=", "31+3="], return_tensors="pt")
    model.eval()
    with torch.no_grad():
        expected = model(**inputs).logits
        got = reloaded(**inputs).logits
        with reloaded.disable_adapter():
            without = reloaded(**inputs).logits
    # Not bit-equal: the trained model's kernels ran in training layout; the adapter's own effect is far larger.
    gap, effect = (got - expected).abs().max().item(), (without - expected).abs().max().item()
    assert gap < 0.05 * effect, (gap, effect)


def test_train_command_qlora_with_pipelined_screening(model_dir, dataset_file, tmp_path, trained):
    """The T4 recipe's combination: a 4-bit base with LoRA, transformers generation, pipelined screening at GRPO's
    budget (the carried probes' old log-probabilities come from the quantized policy that generated them)."""
    recipe = tmp_path / "qlora_pipelined.yaml"
    screening = "\n".join(
        [
            "dynamic_sampling_screen_generations: 2",
            "dynamic_sampling_fixed_budget: true",
            "dynamic_sampling_pipeline: true",
        ]
    )
    text = (RECIPES / "tiny_qlora_cpu.yaml").read_text()
    assert "dynamic_sampling_oversample: 1.0" in text
    recipe.write_text(text.replace("dynamic_sampling_oversample: 1.0", screening))
    summary = _run(str(recipe), model_dir, dataset_file, tmp_path / "run")
    assert summary["steps"] == 3
    import bitsandbytes as bnb

    assert any(isinstance(module, bnb.nn.Linear4bit) for module in trained["trainer"].model.modules())
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    steps = [entry for entry in history if "dynamic_sampling/carried_probes" in entry]
    assert len(steps) == 3 and steps[0]["dynamic_sampling/carried_probes"] > 0
    assert all(entry["dynamic_sampling/stale_row_share"] > 0 for entry in steps[1:]), steps


def test_the_padding_probe_leaves_4bit_layers_trainable(model_dir):
    """`positions.left_padding_moves_logits` runs the model in eval mode without gradients, which on a CPU with
    AVX512-BF16 makes bitsandbytes repack a 4-bit weight into an inference-only layout for good; the probe keeps the
    4-bit layers in training mode, so a training forward and backward still work after it."""
    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from trl_dapo_ext.positions import left_padding_moves_logits

    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
    base = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=quantization, device_map="cpu")
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    model.train()
    assert left_padding_moves_logits(model, pad_token_id=0) is False  # Qwen2: rotary positions
    layers = [module for module in model.modules() if isinstance(module, bnb.nn.Linear4bit)]
    assert layers and model.training and all(module.training for module in layers)
    assert not any(getattr(module.weight.quant_state, "packing_format_for_cpu", False) for module in layers)
    ids = torch.tensor([[5, 6, 7, 8]])
    model(input_ids=ids).logits.float().sum().backward()  # failed in bitsandbytes' 4-bit matmul after the repack
    assert any(p.grad is not None for name, p in model.named_parameters() if "lora_" in name)
