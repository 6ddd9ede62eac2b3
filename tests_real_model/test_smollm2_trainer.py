"""DAPOTrainer + LoRA on a real pretrained instruct model (SmolLM2-135M-Instruct): what only a real tokenizer, chat
template and end-of-turn token can break.

One training run (2 steps, a checkpoint after each) is shared by the tests of this module, and one resumed run from
its first checkpoint; each test reads what they recorded.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from smollm2_lane import (
    LORA_TARGETS,
    MAX_COMPLETION,
    BatchLog,
    chat_dataset,
    lane_config,
    lora_config,
    reward_funcs,
    split_parameters,
)
from transformers import AutoTokenizer

from trl_dapo_ext import DAPOConfig, DAPOTrainer
from trl_dapo_ext.metric_names import OUR_PREFIXES, TRL_METRICS, expected_names

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
# What a resumed step must log as the uninterrupted one did (the timings differ run to run).
REPLAYED = ("reward", "rewards/math_answer_format_reward/mean", "completions/mean_length", "dynamic_sampling/rounds")


def _build(smollm2_dir, output_dir, **overrides):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    funcs = reward_funcs()
    trainer = DAPOTrainer(
        smollm2_dir,  # a path, as a user passes a hub id: TRL loads the model and its generation config
        reward_funcs=funcs,
        args=DAPOConfig(**lane_config(output_dir, **overrides)),
        train_dataset=chat_dataset(),
        processing_class=tokenizer,
        peft_config=lora_config(),
    )
    return trainer, tokenizer, funcs[1], BatchLog().attach(trainer)


@pytest.fixture(scope="module")
def run(smollm2_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("smollm2-dapo")
    trainer, tokenizer, recorder, batches = _build(smollm2_dir, output_dir)
    adapter_before, base_before = split_parameters(trainer.model)
    trainer.train()
    adapter_after, base_after = split_parameters(trainer.model)
    return SimpleNamespace(
        trainer=trainer,
        tokenizer=tokenizer,
        seen=recorder.seen,
        batches=batches.batches,
        adapter_before=adapter_before,
        adapter_after=adapter_after,
        base_before=base_before,
        base_after=base_after,
        output_dir=output_dir,
        logs=[h for h in trainer.state.log_history if "loss" in h],
    )


@pytest.fixture(scope="module")
def resumed(run, smollm2_dir, tmp_path_factory):
    """A fresh trainer resumed from the first checkpoint, trained to the same last step."""
    output_dir = tmp_path_factory.mktemp("smollm2-resumed")
    trainer, _, recorder, batches = _build(smollm2_dir, output_dir)
    trainer.train(resume_from_checkpoint=str(run.output_dir / "checkpoint-1"))
    adapter, base = split_parameters(trainer.model)
    return SimpleNamespace(
        trainer=trainer, adapter=adapter, base=base, logs=[h for h in trainer.state.log_history if "loss" in h]
    )


def _template_ids(tokenizer, messages) -> list[int]:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]


def _rows(batch, ids_key, mask_key):
    """The unpadded rows of a padded (ids, mask) pair of the batch, as lists."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(batch[ids_key], batch[mask_key], strict=True)]


def test_the_model_is_the_pretrained_smollm2_with_its_chat_tokens(run):
    tokenizer, model = run.tokenizer, run.trainer.model
    assert model.get_base_model().config.model_type == "llama"
    base = sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)
    assert base == 134_515_008  # SmolLM2-135M: 30 layers, tied embeddings (the LM head is not counted twice)
    # End of turn is the EOS TRL stops at, and the pad token (both id 2): padding and EOS share an id.
    assert tokenizer.eos_token == tokenizer.pad_token == IM_END
    assert run.trainer.eos_token_ids == [tokenizer.convert_tokens_to_ids(IM_END)]


def test_prompts_are_the_models_chat_template_with_one_bos_and_left_padding(run):
    tokenizer = run.tokenizer
    expected = {tuple(_template_ids(tokenizer, row["prompt"])) for row in chat_dataset()}
    im_start = tokenizer.convert_tokens_to_ids(IM_START)
    assert tokenizer.bos_token == IM_START  # the template writes it itself: a tokenizer adding one would double it
    for batch in run.batches:
        for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"], strict=True):
            kept = ids[mask.bool()].tolist()
            assert tuple(kept) in expected  # exactly the template's tokens, nothing added or lost
            assert kept[0] == im_start and kept[1] != im_start  # one BOS, not two
            text = tokenizer.decode(kept)
            assert text.startswith(f"{IM_START}system\n") and text.endswith(f"{IM_START}assistant\n")
            # Left-padded: the padding (pad id, mask 0) only before the prompt, the prompt flush right.
            padding = int((mask == 0).sum())
            assert mask.tolist() == [0] * padding + [1] * (len(mask) - padding)
            assert set(ids[:padding].tolist()) <= {tokenizer.pad_token_id}


def test_completions_stop_at_the_end_of_turn_token_and_are_cut_there(run):
    eos = run.tokenizer.convert_tokens_to_ids(IM_END)
    terminated = truncated = 0
    for batch in run.batches:
        for ids, mask in zip(batch["completion_ids"], batch["completion_mask"], strict=True):
            length = int(mask.sum())
            assert mask.tolist() == [1] * length + [0] * (len(mask) - length)  # right-padded
            kept = ids[:length].tolist()
            assert eos not in kept[:-1]  # nothing after the first <|im_end|> is trained on
            if kept[-1] == eos:
                terminated += 1
            else:
                assert length == MAX_COMPLETION  # only the length limit ends a completion without <|im_end|>
                truncated += 1
    assert terminated > 0, "no completion ended with <|im_end|>"
    assert terminated + truncated == sum(len(b["completion_ids"]) for b in run.batches)


def test_the_reward_sees_exactly_the_generated_text(run):
    tokenizer = run.tokenizer
    eos = tokenizer.convert_tokens_to_ids(IM_END)
    assert run.seen, "the recording reward was never called"
    for text, ids in run.seen:
        # The completion's own tokens, as they were generated: no special token, no whitespace clean-up.
        assert text == tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert IM_END not in text and IM_START not in text
        assert eos not in ids[:-1]
    # Every row the loss trains on is one whose text a reward scored (dynamic sampling's assembly kept rows whole).
    scored = {tuple(ids) for _, ids in run.seen}
    for batch in run.batches:
        for row in _rows(batch, "completion_ids", "completion_mask"):
            assert tuple(row) in scored


def test_lora_weights_change_and_the_base_weights_do_not(run):
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in run.adapter_before} == set(LORA_TARGETS)
    trainable = {name for name, p in run.trainer.model.named_parameters() if p.requires_grad}
    assert trainable == set(run.adapter_before)  # only the adapter trains
    lora_b = [name for name in run.adapter_before if "lora_B" in name]
    moved = [name for name in lora_b if not torch.equal(run.adapter_before[name], run.adapter_after[name])]
    assert moved, "no LoRA B matrix moved from zero: no informative group in two steps?"
    unchanged = [name for name in run.base_before if not torch.equal(run.base_before[name], run.base_after[name])]
    assert unchanged == []


def test_every_declared_metric_is_logged(run):
    assert len(run.logs) == 2
    ours = expected_names(diagnostics=True, dynamic_sampling=True, overlong=True, planner=False, cuda=False)
    trls = {m.name for m in TRL_METRICS if m.when == "always"}  # no KL (beta=0), vLLM or tools here
    for log in run.logs:
        logged = {key for key in log if key.startswith(OUR_PREFIXES)}
        assert logged == ours, f"undeclared: {sorted(logged - ours)}, not logged: {sorted(ours - logged)}"
        assert trls <= set(log), sorted(trls - set(log))
        assert {"rewards/math_reward/mean", "rewards/math_answer_format_reward/mean"} <= set(log)


def test_dynamic_sampling_ran_its_rounds(run):
    for log in run.logs:
        assert log["dynamic_sampling/rounds"] >= 1
        assert log["dynamic_sampling/retained_groups"] + log["dynamic_sampling/filled_groups"] == 2


def test_the_checkpoint_holds_the_adapter_not_a_copy_of_the_base(run):
    checkpoint = run.output_dir / "checkpoint-1"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    assert set(config["target_modules"]) == set(LORA_TARGETS)
    assert not (checkpoint / "model.safetensors").exists()


def test_resume_from_the_adapter_checkpoint_trains_the_same_last_step(run, resumed):
    # Step 1's log comes back from the checkpoint's trainer_state.json; step 2 is trained again.
    assert [h["step"] for h in resumed.logs] == [1, 2] and resumed.logs[0] == run.logs[0]
    full, again = run.logs[-1], resumed.logs[-1]
    for key in REPLAYED:
        assert again[key] == full[key], key  # the same completions were generated after the resume
    for name, tensor in run.adapter_after.items():
        torch.testing.assert_close(resumed.adapter[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert all(torch.equal(resumed.base[name], tensor) for name, tensor in run.base_before.items())


def test_the_placeholder_the_policy_learned_to_write_earns_nothing():
    """A cheap regression check on the reward hack a real model found (SmolLM2 learned to write the literal
    placeholder \\boxed{number} in 8 steps of trl-dapo train): no model run needed to keep it."""
    hacked = ["The answer is \\boxed{number}.", "So the final answer is $\\boxed{number}$"]
    funcs = reward_funcs()
    assert funcs[0](hacked, answer=["5", "5"]) == [0.0, 0.0]  # math_reward: no number, no credit
    assert funcs[1].inner(hacked) == [0.0, 0.0]  # the format bonus must not pay for it either


def test_a_rotary_model_with_special_tokens_is_not_taken_for_absolute_positions(run):
    """SmolLM2 numbers positions by RoPE, so left padding leaves its log-probs as they were (to ~1e-4 in float32), and
    dynamic sampling may keep round log-probs with it (vLLM's importance sampling, num_iterations > 1, beta > 0). Its
    first ids are special tokens whose outlying activations moved a probe made of them by ~5e-3, past the float32
    tolerance: SmolLM2 + LoRA through vLLM was refused."""
    from trl_dapo_ext.positions import left_padding_moves_logits

    assert not left_padding_moves_logits(run.trainer.model, run.tokenizer.pad_token_id)
