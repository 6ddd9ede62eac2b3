"""SmolLM2-135M-Instruct (the real-model lane's model) through vLLM colocate: LoRA on the attention projections,
dynamic sampling, overlong shaping and the math rewards on its own chat template, with vLLM generating.

What a real model adds over the tiny one here: vLLM stops at the model's end-of-turn token from its own
tokenizer and generation config, the text the rewards see is vLLM's tokens decoded by the trainer, vLLM runs the
checkpoint in float32 here (conftest's `eager_float32_vllm`; vLLM's default bfloat16 is emulated on this CPU), and
TRL's requests carry no per-request seed (`test_vllm_sampling_seed.py` says why that matters).
"""

from __future__ import annotations

import torch
from backend_helpers import LOGP_DIFF, RoundLog
from smollm2_lane import BatchLog, chat_dataset, lane_config, lora_config, reward_funcs, split_parameters
from transformers import AutoTokenizer

from trl_dapo_ext import DAPOConfig, DAPOTrainer

IM_END = "<|im_end|>"
# Mean |log p_policy - log p_vLLM| per round. Measured with vLLM in bfloat16 (the policy in float32): 0.023 to 0.033
# in sync; with BACKENDS_BREAK=sync (vLLM keeps the initial weights) the second step's rounds gave 0.072 to 0.077.
# vLLM now runs in float32, which only narrows the in-sync difference.
SMOLLM2_LOGP_TOLERANCE = 0.06


class SamplingLog:
    """The SamplingParams of every vLLM generate call TRL makes."""

    def __init__(self, llm):
        self.params = []
        original = llm.generate

        def generate(*args, **kwargs):
            from vllm import SamplingParams

            self.params += [a for a in (*args, *kwargs.values()) if isinstance(a, SamplingParams)]
            return original(*args, **kwargs)

        llm.generate = generate


def test_smollm2_lora_with_dynamic_sampling_through_vllm_colocate(smollm2_dir, tmp_path, eager_float32_vllm):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    funcs = reward_funcs()
    args = DAPOConfig(
        **lane_config(
            tmp_path,
            save_strategy="no",
            use_vllm=True,
            vllm_mode="colocate",
            vllm_enable_sleep_mode=False,  # CUDA-only in vLLM
            vllm_max_model_length=128,  # a ~40-token prompt and 48 new tokens
        )
    )
    trainer = DAPOTrainer(
        smollm2_dir,
        reward_funcs=funcs,
        args=args,
        train_dataset=chat_dataset(),
        processing_class=tokenizer,
        peft_config=lora_config(),
    )
    adapter_before, base_before = split_parameters(trainer.model)
    rounds, batches = RoundLog(trainer), BatchLog().attach(trainer)
    sampling = SamplingLog(trainer.vllm_generation.llm)
    trainer.train()
    adapter_after, base_after = split_parameters(trainer.model)

    # TRL seeds the engine, not the requests: no request can hit the CPU generator crash.
    assert trainer.vllm_generation.llm.llm_engine.vllm_config.model_config.seed == 0
    assert sampling.params and all(params.seed is None for params in sampling.params)

    # vLLM stops at <|im_end|> (and returns it); the trainer cuts there and the rewards see the decoded tokens.
    eos = tokenizer.convert_tokens_to_ids(IM_END)
    terminated = 0
    for batch in batches.batches:
        for ids, mask in zip(batch["completion_ids"], batch["completion_mask"], strict=True):
            kept = ids[mask.bool()].tolist()
            assert eos not in kept[:-1]
            terminated += kept[-1] == eos
    assert terminated > 0
    recorder = funcs[1]
    for text, ids in recorder.seen:
        assert text == tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    # The adapter learned; TRL merged it into the base for every sync and unmerged it again.
    lora_b = [name for name in adapter_before if "lora_B" in name]
    assert any(not torch.equal(adapter_before[n], adapter_after[n]) for n in lora_b)
    assert max((base_after[n] - base_before[n]).abs().max().item() for n in base_before) < 1e-5

    # Every round sampled from the current policy (LoRA merged in), within the tolerance.
    print("per-round logp difference:", rounds.steps)
    assert len(rounds.steps) == 2 and sum(len(step) for step in rounds.steps) == sum(rounds.rounds)
    assert max(rounds.values) < SMOLLM2_LOGP_TOLERANCE, rounds.steps
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(LOGP_DIFF in log and log["dynamic_sampling/rounds"] >= 1 for log in logs)
