"""The demo's model and tokenizer, built locally: a Qwen2-architecture model (~0.5M parameters at the default size)
and a character tokenizer."""

from __future__ import annotations

SIZES = {
    "tiny": dict(hidden_size=64, num_layers=2, intermediate_size=256),
    "small": dict(hidden_size=128, num_layers=2, intermediate_size=512),
}


def build_tokenizer_and_model(size: str, seed: int):
    """The character tokenizer and an untrained model of ``SIZES[size]`` whose weights ``seed`` draws."""
    from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

    # <bos> first, as GRPOTrainer tokenizes prompts with the tokenizer's special tokens: the warm start must match.
    # "#### " is one token, so a completion is the anchor, the digits and <eos>: every sampled token but one matters.
    tokenizer = build_char_tokenizer(alphabet="0123456789+=# ", add_bos=True, words=("#### ",))
    model = build_tiny_causal_lm(tokenizer, num_heads=4, max_positions=64, seed=seed, **SIZES[size])
    return tokenizer, model
