"""Dynamic sampling refuses models whose positions move with left padding where TRL keeps a round's log-probs.

Re-padding a narrower round's prompts (`dynamic_sampling.assembly.concat_rows`) shifts an absolute-position model's
positions (GPT-2), so log-probabilities TRL computed in the round no longer match the loss's (`trl_dapo_ext.positions`).
"""

from __future__ import annotations

import pytest
import torch
from test_dynamic_sampling import build, kinds_dataset
from transformers import GPT2Config, GPT2LMHeadModel

from trl_dapo_ext import positions
from trl_dapo_ext.dynamic_sampling.assembly import concat_rows

pytestmark = pytest.mark.trainer


def tiny_gpt2(tokenizer) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=1,
        n_head=2,
        n_positions=128,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return GPT2LMHeadModel(config)


def completion_log_probs(model, prompt_ids, prompt_mask, completion_ids) -> torch.Tensor:
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -completion_ids.shape[1] - 1 : -1]
    return logits.log_softmax(-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def test_the_probe_tells_absolute_positions_from_rotary_ones(make_model, tokenizer):
    """The probe's verdict is the re-padding's effect: a row's log-probs at its round's width against the batch's."""
    for model, moves in ((tiny_gpt2(tokenizer), True), (make_model(seed=0), False)):
        model.eval()
        narrow = {"prompt_ids": torch.tensor([[5, 6, 7]]), "prompt_mask": torch.ones(1, 3, dtype=torch.long)}
        wide = {"prompt_ids": torch.tensor([[5, 6, 7, 8, 9]]), "prompt_mask": torch.ones(1, 5, dtype=torch.long)}
        completion = torch.tensor([[9, 10, 11]])
        merged = concat_rows([narrow, wide], pad_token_id=tokenizer.pad_token_id)
        in_round = completion_log_probs(model, narrow["prompt_ids"], narrow["prompt_mask"], completion)
        in_batch = completion_log_probs(model, merged["prompt_ids"][:1], merged["prompt_mask"][:1], completion)
        assert (not torch.allclose(in_round, in_batch, atol=1e-4)) == moves
        assert positions.left_padding_moves_logits(model, tokenizer.pad_token_id) == moves


KEEPS_ROUND_LOG_PROBS = [
    {"num_iterations": 2},
    {"beta": 0.1},
    {
        "dynamic_sampling_screen_generations": 2,
        "dynamic_sampling_fixed_budget": True,
        "dynamic_sampling_pipeline": True,
    },
]


@pytest.mark.parametrize(
    "overrides", KEEPS_ROUND_LOG_PROBS, ids=["old-log-probs", "reference-log-probs", "pipelined-screening"]
)
def test_an_absolute_position_model_is_refused_where_round_log_probs_are_kept(tokenizer, tmp_path, overrides):
    model = tiny_gpt2(tokenizer)
    if "beta" in overrides:  # TRL loads the reference model from the policy's path
        model.save_pretrained(tmp_path / "policy")
        model = str(tmp_path / "policy")
    with pytest.raises(ValueError, match="absolute position embeddings"):
        build(None, tokenizer, tmp_path, kinds_dataset(["varying"], 12), model=model, **overrides)


def test_an_absolute_position_model_trains_where_no_round_log_probs_are_kept(tokenizer, tmp_path):
    trainer, _, _ = build(
        None, tokenizer, tmp_path, kinds_dataset(["varying", "right"], 12), model=tiny_gpt2(tokenizer)
    )
    trainer.train()  # the loss recomputes every log-prob on the batch as assembled: nothing to compare with


def test_a_rotary_model_is_accepted_with_round_log_probs(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(["varying", "right"], 12), num_iterations=2)
    trainer.train()


def test_sharded_weights_are_probed_at_the_first_step(tokenizer, tmp_path, monkeypatch):
    """Under DeepSpeed ZeRO-3 the module holds no weights at construction: the probe waits for the first step."""
    monkeypatch.setattr("trl_dapo_ext.trainer.parameters_are_partitioned", lambda model: True)
    trainer, _, _ = build(
        None, tokenizer, tmp_path, kinds_dataset(["varying"], 12), model=tiny_gpt2(tokenizer), num_iterations=2
    )
    with pytest.raises(ValueError, match="absolute position embeddings"):
        trainer.train()
