"""The test-only CPU workaround itself: weights pushed the way TRL's colocate sync does reach vLLM's kernels.

vLLM runs in float32 here, where its CPU GEMM dispatch packs the weights for oneDNN on AVX2 and AVX-512 hosts alike
(TRL's colocate engine runs in bfloat16, for which oneDNN fails on some AVX2 CPUs and vLLM falls back to plain
``torch.nn.functional.linear`` by itself; on AVX-512 CPUs it packs them too). Without the shim ``load_weights``
raises ``'Parameter' object has no attribute 'weight_loader'`` (``BACKENDS_BREAK=shim``).
"""

from __future__ import annotations

import os

import torch


def test_pushed_weights_reach_vllm(model_dir):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import ensure_master_addr_port
    from vllm import LLM, SamplingParams

    # As TRL's colocate mode builds its engine: in this process, through vLLM's external launcher.
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    ensure_master_addr_port()
    llm = LLM(
        model=model_dir,
        dtype="float32",
        max_model_len=64,
        gpu_memory_utilization=0.3,
        distributed_executor_backend="external_launcher",
        logprobs_mode="processed_logprobs",
    )
    policy = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
    engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    engine_model.load_weights([(name, param.data) for name, param in policy.named_parameters()])  # TRL's sync

    prompt = [2, 5, 6, 7]
    sampling = SamplingParams(max_tokens=4, logprobs=0, temperature=1.0, seed=0)
    out = llm.generate([{"prompt_token_ids": prompt}], sampling, use_tqdm=False)[0].outputs[0]
    with torch.no_grad():
        logits = policy(torch.tensor([prompt + list(out.token_ids)])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits, -1)[torch.arange(len(out.token_ids)), torch.tensor(out.token_ids)]
    got = torch.tensor([step[token].logprob for token, step in zip(out.token_ids, out.logprobs)])
    # The perturbation moves log-probs by ~0.1; in sync they agree to float32 rounding.
    assert (got - expected).abs().max().item() < 1e-4, (got, expected)
